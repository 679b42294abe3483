package redact

import (
	"fmt"
	"strings"
	"testing"
)

// planted is the secret the fuzz targets hide in a URL: it must turn up
// in nothing URL or Text returns.
const planted = "Pl4nt3dS3cr3t"

var schemes = []string{"http", "https", "postgres", "nats", "tls", "HTTP", "x+y.z-w"}

// FuzzURL builds URLs from outside input with the planted secret in the
// password, in a user-info without password, in the query (as a value,
// as a key alone, after other keys) or in the fragment, and checks that
// neither URL nor Text (of the URL quoted as net/http quotes it, and
// bare, when it has no space or quote to end it early) lets it through.
// Any string at all must not panic URL or Text, and what URL returns
// from a '?' or '#' on is the mask alone.
func FuzzURL(f *testing.F) {
	f.Add(uint8(0), uint8(0), "u", "host:8080", "/m2m", "k")
	f.Add(uint8(1), uint8(1), "", "127.0.0.1", "/a/b@c", "")
	f.Add(uint8(2), uint8(2), "a@b", "[::1]:1", "", "x=1&")
	f.Add(uint8(3), uint8(3), "u:v", "h", "/p%zz", "a;b")
	f.Add(uint8(4), uint8(5), "u/x", "h?", "#", "=")
	f.Fuzz(func(t *testing.T, where, sch uint8, user, host, path, key string) {
		for _, s := range []string{user, host, path, key} {
			if strings.Contains(s, planted[:4]) {
				return // the input spells the secret itself
			}
		}
		var u string
		scheme := schemes[int(sch)%len(schemes)] + "://"
		switch where % 6 {
		case 0:
			u = scheme + user + ":" + planted + "@" + host + path
		case 1:
			u = scheme + planted + "@" + host + path
		case 2:
			u = scheme + host + path + "?" + key + "=" + planted
		case 3:
			u = scheme + host + path + "?" + planted
		case 4:
			u = scheme + host + path + "?" + key + "&t=" + planted + "&z=1"
		case 5:
			u = scheme + host + path + "#" + planted
		}
		if got := URL(u); strings.Contains(got, planted) {
			t.Fatalf("URL(%q) = %q", u, got)
		}
		quotedErr := fmt.Sprintf("Post %q: dial tcp: connection refused", u)
		if got := Text(quotedErr); strings.Contains(got, planted) {
			t.Fatalf("Text(%q) = %q", quotedErr, got)
		}
		if !strings.ContainsAny(u, " \t\n\r\v\f\u0085\u00a0\"'<>`\\") {
			bare := "POST " + u + ": http 502"
			if got := Text(bare); strings.Contains(got, planted) {
				t.Fatalf("Text(%q) = %q", bare, got)
			}
		}
		if where%6 < 2 {
			return // a user-info is not echoed: it travels in a header
		}
		if got := SecretsOf(u).Text("the gateway echoed " + planted); strings.Contains(got, planted) {
			t.Fatalf("SecretsOf(%q) kept it: %q", u, got)
		}
	})
}

// FuzzText: any text at all is masked without a panic, and masking is
// stable (what Text returns, Text leaves as it is).
func FuzzText(f *testing.F) {
	f.Add(`Post "http://h/m2m?api_key=s": EOF`)
	f.Add("postgres://u:p@h/db password='x y' /a?b //c#d")
	f.Add(`"//\"@`)
	f.Fuzz(func(t *testing.T, s string) {
		once := Text(s)
		if twice := Text(once); twice != once {
			t.Fatalf("Text is not stable on %q:\n once %q\ntwice %q", s, once, twice)
		}
		u := URL(s)
		if i := strings.IndexAny(u, "?#"); i >= 0 {
			if rest := u[i:]; rest != queryMask && rest != fragmentMask && rest != queryMask+fragmentMask {
				t.Fatalf("URL(%q) = %q shows what follows its %q", s, u, u[i])
			}
		}
	})
}
