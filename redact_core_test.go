package mensageria

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestRelayKeepsNoSecretOfAURL: whatever a Sender's error or name quotes,
// what a row keeps of it (storable: last_error, last_route, route_state)
// and what the relay logs through its Logger show no user-info password
// nor query string.
func TestRelayKeepsNoSecretOfAURL(t *testing.T) {
	const secret = "s3cr3t-k3y"
	err := errors.New(`Post "https://gw.example/in?api_key=` + secret + `": dial tcp: connection refused`)
	if got := errText(err); strings.Contains(got, secret) || !strings.Contains(got, "https://gw.example/in?…") {
		t.Fatalf("stored error: %q", got)
	}
	if got := storable("app → custom postgres://u:"+secret+"@db/x", maxRouteLen); strings.Contains(got, secret) {
		t.Fatalf("stored route: %q", got)
	}
	var buf bytes.Buffer
	c, cerr := (&Config{App: "a", Logger: slog.New(slog.NewTextHandler(&buf, nil))}).withDefaults()
	if cerr != nil {
		t.Fatal(cerr)
	}
	c.Logger.Warn("message parked as dead", "err", err)
	if strings.Contains(buf.String(), secret) || !strings.Contains(buf.String(), "parked as dead") {
		t.Fatalf("log: %s", buf.String())
	}
}
