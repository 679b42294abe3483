package config

import (
	"strings"
	"testing"
)

// Both schemes name the MySQL backend; a URL without a database, or with
// a parameter the Go driver does not know, is refused at load with the
// password masked.
func TestParseConfigMySQLURLs(t *testing.T) {
	cfg := func(db string) string {
		return "database: " + db + "\napp: a\nroutes:\n  - type: t\n    http: {url: 'http://h/p', token: x}\nrelay: {election: none, poll_only: true}\n"
	}
	for _, db := range []string{"mysql://app:s3cret@db.internal:3306/orders", "mariadb://root@127.0.0.1/test?tls=skip-verify"} {
		c, err := ParseConfig("m.yaml", []byte(cfg(db)), envOf())
		if err != nil {
			t.Fatalf("%s: %v", db, err)
		}
		if c.Backend() != "mysql" {
			t.Fatalf("%s: backend %q, want mysql", db, c.Backend())
		}
		if _, err := ParseReceiveConfig("r.yaml", []byte("database: "+db+"\napp: a\nreceive: {listen: '127.0.0.1:0', tokens: [tok-0123456789abcdef]}\nconsumers:\n  - {name: c, types: [t]}\n"), envOf()); err != nil {
			t.Fatalf("receive config on %s: %v", db, err)
		}
	}
	for _, bad := range []string{"mysql://app:s3cret@db.internal:3306/", "mysql://app:s3cret@h/orders?nosuchparam=%zz"} {
		_, err := ParseConfig("m.yaml", []byte(cfg(bad)), envOf())
		if err == nil || !strings.Contains(err.Error(), "MariaDB/MySQL URL") {
			t.Fatalf("%s: %v, want a refusal naming the URL's form", bad, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: the refusal shows the password: %v", bad, err)
		}
	}
}
