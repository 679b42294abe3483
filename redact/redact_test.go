package redact

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://gw.example/m2m", "https://gw.example/m2m"},
		{"https://gw.example/m2m?api_key=s3cr3t", "https://gw.example/m2m?…"},
		{"https://gw.example/m2m?", "https://gw.example/m2m?…"},
		{"https://gw.example/m2m#access_token=s3cr3t", "https://gw.example/m2m#…"},
		{"https://gw.example/m2m?a=1#frag", "https://gw.example/m2m?…#…"},
		{"postgres://app:s3cr3t@db:5432/orders?sslmode=require", "postgres://app:xxxxx@db:5432/orders?…"},
		{"postgresql://app@db/orders", "postgresql://xxxxx@db/orders"},
		{"nats://s3cr3ttoken@nats:4222", "nats://xxxxx@nats:4222"},
		{"http://u:p%40ss@h/x", "http://u:xxxxx@h/x"},
		{"http://u:p@ss@h/x", "http://u:xxxxx@h/x"},
		// Broken by an unescaped character in the password: by shape.
		{"postgres://u:pa/ss@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:pa?ss@h/db", "postgres://xxxxx@…"},
		{"postgres://u:pa#ss@h/db", "postgres://xxxxx@…"},
		{"https://h/hook?email=a@b.c&k=s3cr3t", "https://h/hook?…"},
		{"postgres://u:pa ss@h/db", "postgres://u:xxxxx@h/db"},
		{"http://u:12/34@h/x", "http://u:xxxxx@h/x"},
		{"http://h/x%zz?k=s3cr3t", "http://h/x%zz?…"},
		// An '@' in the path is taken for a user-info's: less shown.
		{"https://h/users/@me", "https://xxxxx@me"},
		{"/m2m?api_key=s3cr3t", "/m2m?…"},
		{"/m2m", "/m2m"},
		{"sqlite:/var/lib/m.db", "sqlite:/var/lib/m.db"},
		{"sqlite:m.db?_pragma=x", "sqlite:m.db?…"},
		{"//u:p@h/x?y", "//u:xxxxx@h/x?…"},
		{"", ""},
	} {
		if got := URL(c.in); got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"no url here", "no url here"},
		{`Post "http://127.0.0.1:1/m2m?api_key=s3cr3t": dial tcp 127.0.0.1:1: connect: connection refused`,
			`Post "http://127.0.0.1:1/m2m?…": dial tcp 127.0.0.1:1: connect: connection refused`},
		{`Post "http://h/m2m?k=a\"b c": EOF`, `Post "http://h/m2m?…": EOF`},
		{"POST https://u:p@h/x?k=v: http 502", "POST https://u:xxxxx@h/x?…: http 502"},
		{"http 307 Temporary Redirect: redirect not followed (Location: /m2m?api_key=s3cr3t)",
			"http 307 Temporary Redirect: redirect not followed (Location: /m2m?…)"},
		{"Cannot POST /m2m?api_key=s3cr3t", "Cannot POST /m2m?…"},
		{"cannot parse `host=db password=s3cr3t sslmode=x`", "cannot parse `host=db password=xxxxx sslmode=x`"},
		{"password='s3 cr3t' host=db", "password=xxxxx host=db"},
		{"is it 1/2? yes", "is it 1/2? yes"},
		{"a // comment", "a // comment"},
		{"two: http://a/?x=1 and postgres://u:p@b/c", "two: http://a/?… and postgres://u:xxxxx@b/c"},
	} {
		if got := Text(c.in); got != c.want {
			t.Errorf("Text(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
	}
}

// TestErrorMasksURLErrors: net/http's *url.Error quotes the request's
// whole URL; Error masks it in the text and in the field, and errors.Is
// and errors.As still see through.
func TestErrorMasksURLErrors(t *testing.T) {
	_, err := http.Post("http://127.0.0.1:1/m2m?api_key=s3cr3tKEY", "application/json", nil)
	if err == nil {
		t.Fatal("a POST to port 1 succeeded")
	}
	wrapped := fmt.Errorf("deliver: %w", err)
	m := Error(wrapped)
	if strings.Contains(m.Error(), "s3cr3tKEY") || !strings.Contains(m.Error(), "http://127.0.0.1:1/m2m?…") {
		t.Fatalf("masked: %q", m)
	}
	var ue *url.Error
	if !errors.As(m, &ue) || strings.Contains(ue.Error(), "s3cr3tKEY") {
		t.Fatalf("url.Error behind it: %v", ue)
	}
	if !errors.Is(m, err) {
		t.Fatal("errors.Is lost the original")
	}
	if Error(nil) != nil {
		t.Fatal("Error(nil) is not nil")
	}
	plain := errors.New("nothing to hide")
	if Error(plain) != plain {
		t.Fatal("an error with nothing to mask was wrapped")
	}
}

func TestSecretsOf(t *testing.T) {
	s := SecretsOf("https://gw.example/m2m?api_key=s3cr3t%2Bkey&region=eu")
	for _, echo := range []string{
		"upstream said: api_key=s3cr3t%2Bkey&region=eu",
		"bad key s3cr3t+key",
		"bad key s3cr3t%2Bkey",
	} {
		if got := s.Text(echo); strings.Contains(got, "s3cr3t") {
			t.Errorf("Text(%q) = %q", echo, got)
		}
	}
	// Short values are masked in the URL only: "eu" stays in a text.
	if got := s.Text("region eu is down"); got != "region eu is down" {
		t.Errorf("short value masked: %q", got)
	}
	if SecretsOf("https://gw.example/m2m") != nil {
		t.Error("a URL with no secret has Secrets")
	}
	var none *Secrets
	if got := none.Text("POST http://h/?k=v"); got != "POST http://h/?…" {
		t.Errorf("nil Secrets: %q", got)
	}
	err := s.Error(errors.New("http 502: Cannot POST /m2m (key s3cr3t+key)"))
	if strings.Contains(err.Error(), "s3cr3t") {
		t.Errorf("Error: %q", err)
	}
}

func TestHandler(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(Handler(slog.NewJSONHandler(&buf, nil))).With("dest", "https://u:p4ss@h/x?k=s3cr3t")
	_, err := http.Get("http://127.0.0.1:1/x?token=s3cr3t")
	u, _ := url.Parse("https://h/x?token=s3cr3t")
	var nilErr *url.Error
	log.WithGroup("g").Warn("failed for http://h/?token=s3cr3t", "err", err, "url", u, "s", "postgres://a:s3cr3t@b/c",
		slog.Group("in", "x", "nats://s3cr3t@n:4222"), "nilerr", error(nilErr), "n", 3)
	out := buf.String()
	if strings.Contains(out, "s3cr3t") || strings.Contains(out, "p4ss") || !strings.Contains(out, `"n":3`) {
		t.Fatalf("log: %s", out)
	}
	if _, twice := Handler(Handler(slog.NewTextHandler(&buf, nil))).(*handler).h.(*handler); twice {
		t.Fatal("wrapped twice")
	}
}
