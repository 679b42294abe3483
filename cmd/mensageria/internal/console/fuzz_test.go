package console

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/xadm/mensageria/driver"
)

// An action body never selects nothing, never both ways, never an id that
// is not a message id, and never a whole type without all: true; anything
// refused is an ErrBadRequest.
func FuzzDecodeAction(f *testing.F) {
	for _, s := range []string{`{"ids":[1,2]}`, `{"type":"t","all":true}`, `{"type":"t"}`, `{}`, `{"ids":[0]}`, `{"ids":[1,1]}`, `{"ids":[1],"all":true}`, `null`, `[1]`, `{"ids":[1]} {}`, `{"ids":[9223372036854775807]}`, `{"ids":[1],"allow_duplicate":true}`, `{"type":"t","all":true,"allow_duplicate":false}`} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, discard bool) {
		p, err := DecodeAction(bytes.NewReader(body), discard)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%q: error %v is not ErrBadRequest", body, err)
			}
			return
		}
		// Sending a marked dead letter again is asked for in so many
		// words, and only by a retry.
		if p.AllowDuplicate {
			var a Action
			if discard || json.Unmarshal(body, &a) != nil || !a.AllowDuplicate {
				t.Fatalf("%q: AllowDuplicate without allow_duplicate in a retry: %+v", body, p)
			}
		}
		switch {
		case len(p.IDs) > 0 && len(p.Types) > 0, len(p.IDs) == 0 && len(p.Types) != 1:
			t.Fatalf("%q: selection %+v", body, p)
		case len(p.Types) == 1:
			var a Action
			if json.Unmarshal(body, &a) != nil || !a.All || a.Type != p.Types[0] || p.Types[0] == "" {
				t.Fatalf("%q: a whole type without all: true: %+v", body, p)
			}
		}
		seen := map[int64]bool{}
		for _, id := range p.IDs {
			if id <= 0 || seen[id] {
				t.Fatalf("%q: ids %v", body, p.IDs)
			}
			seen[id] = true
		}
		if len(p.IDs) > maxActionIDs {
			t.Fatalf("%q: %d ids", body, len(p.IDs))
		}
	})
}

// A login body is a token or a user and password, never both, never
// neither.
func FuzzDecodeLogin(f *testing.F) {
	for _, s := range []string{`{"token":"x"}`, `{"user":"u","password":"p"}`, `{"token":"x","user":"u"}`, `{}`, `{"user":"u"}`, `"x"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := DecodeLogin(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%q: error %v is not ErrBadRequest", body, err)
			}
			return
		}
		token := l.Token != ""
		basic := l.User != "" && l.Password != ""
		if token == basic || (token && (l.User != "" || l.Password != "")) {
			t.Fatalf("%q: login %+v", body, l)
		}
		if len(body) > maxBody || strings.TrimSpace(string(body)) == "" {
			t.Fatalf("%q: accepted", body)
		}
	})
}

// A resolve body selects by distinct positive ids only (at most
// maxActionIDs), names one of the three outcomes and carries a non-blank
// reason; it never says who decides. Anything refused is an ErrBadRequest.
func FuzzDecodeResolve(f *testing.F) {
	for _, s := range []string{`{"ids":[1],"outcome":"delivered","reason":"billing has it"}`, `{"ids":[1,2],"outcome":"retry","reason":"x"}`,
		`{"ids":[1],"outcome":"dead","reason":"  "}`, `{"ids":[],"outcome":"dead","reason":"r"}`, `{"ids":[1],"outcome":"maybe","reason":"r"}`,
		`{"ids":[1,1],"outcome":"dead","reason":"r"}`, `{"ids":[-1],"outcome":"dead","reason":"r"}`, `{"ids":[1],"outcome":"dead","reason":"r","by":"root"}`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := DecodeResolve(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%q: error %v is not ErrBadRequest", body, err)
			}
			return
		}
		if p.By != "" {
			t.Fatalf("%q: the body named who decides: %q", body, p.By)
		}
		if strings.TrimSpace(p.Reason) == "" || len(p.Reason) > maxReason {
			t.Fatalf("%q: reason %q", body, p.Reason)
		}
		if p.Outcome != "delivered" && p.Outcome != "retry" && p.Outcome != "dead" {
			t.Fatalf("%q: outcome %q", body, p.Outcome)
		}
		if len(p.IDs) == 0 || len(p.IDs) > maxActionIDs {
			t.Fatalf("%q: %d ids", body, len(p.IDs))
		}
		seen := map[int64]bool{}
		for _, id := range p.IDs {
			if id <= 0 || seen[id] {
				t.Fatalf("%q: ids %v", body, p.IDs)
			}
			seen[id] = true
		}
		// With By set, the driver accepts the decision as it is.
		p.By = "ops"
		if err := p.Check(); err != nil {
			t.Fatalf("%q: decoded %+v, which the driver refuses: %v", body, p, err)
		}
	})
}

// A pause body names a type (1 to 200 bytes of UTF-8) and, for a pause, a
// non-blank reason within the drivers' bound; a resume carries no reason.
// Anything refused is an ErrBadRequest; what is accepted passes the
// drivers' own check.
func FuzzDecodePause(f *testing.F) {
	for _, s := range []string{`{"type":"pedido.criado","reason":"upgrade"}`, `{"type":"pedido.criado"}`, `{"type":"","reason":"x"}`,
		`{"type":"t","reason":"  "}`, `{"type":"t","reason":"a\u0000b"}`, `{"type":"t","reason":"x","by":"root"}`, `[]`, `null`} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, pause bool) {
		q, err := DecodePause(bytes.NewReader(body), pause)
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("%q: error %v is not ErrBadRequest", body, err)
			}
			return
		}
		if q.Type == "" || len(q.Type) > 200 {
			t.Fatalf("%q: accepted type %q", body, q.Type)
		}
		if !pause {
			if q.Reason != "" {
				t.Fatalf("%q: a resume kept a reason", body)
			}
			return
		}
		if err := driver.CheckPauseRoute(driver.PauseRouteParams{App: "a", Type: q.Type, PausedBy: "op", Reason: q.Reason}); err != nil {
			t.Fatalf("%q: accepted %+v, which the drivers refuse: %v", body, q, err)
		}
	})
}
