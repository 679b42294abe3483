package mysql

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"10.11.19-MariaDB-0+deb12u1": true,
		"10.6.0-MariaDB":             true,
		"11.4.2-MariaDB":             true,
		"10.5.23-MariaDB-1:10.5.23":  false,
		"5.5.5-10.3.39-MariaDB":      false, // the old replication prefix
		"8.0.36":                     true,
		"8.4.0-commercial":           true,
		"5.7.44-log":                 false,
		"garbage":                    false,
	} {
		err := checkVersion(v)
		if (err == nil) != ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", v, err, ok)
		}
		if err != nil && (!errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), v)) {
			t.Errorf("checkVersion(%q) = %v, want an ErrVersion naming the version", v, err)
		}
	}
}

func TestStatementsSplitsTriggers(t *testing.T) {
	script := "-- a comment; with a semicolon\nCREATE TABLE a (x INT);\n\nDELIMITER //\nCREATE TRIGGER t BEFORE INSERT ON a FOR EACH ROW\nBEGIN\n    SET NEW.x = 1;\n    SET NEW.x = 2;\nEND//\nDELIMITER ;\nINSERT INTO a VALUES (1);\n"
	got := Statements(script)
	if len(got) != 3 || !strings.HasPrefix(got[1], "CREATE TRIGGER") || !strings.HasSuffix(got[1], "END") || strings.Count(got[1], ";") != 2 || got[2] != "INSERT INTO a VALUES (1)" {
		t.Fatalf("Statements = %q", got)
	}
}

func TestEveryMigrationSplits(t *testing.T) {
	d := &Driver{prefix: "p_"}
	ms, err := d.MigrationSQL(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, s := range Statements(m.SQL) {
			if strings.Contains(s, "DELIMITER") || strings.HasSuffix(s, ";") && !strings.HasSuffix(s, "END IF;") {
				t.Errorf("migration %d: statement ends badly: %q", m.Version, s[max(0, len(s)-60):])
			}
		}
	}
}

func TestDSNFromURL(t *testing.T) {
	for in, want := range map[string]string{
		"mysql://root@127.0.0.1:3306/test":            "root@tcp(127.0.0.1:3306)/test",
		"mariadb://u:p%40ss@db/orders?tls=true":       "u:p@ss@tcp(db:3306)/orders?tls=true",
		"mysql://u@[::1]/x?timeout=5s&readTimeout=1s": "u@tcp([::1]:3306)/x?",
	} {
		got, err := DSNFromURL(in)
		if err != nil || !strings.HasPrefix(got, want) {
			t.Errorf("DSNFromURL(%q) = %q, %v; want %q…", in, got, err, want)
		}
	}
}

// FuzzDSNFromURL: a URL from a config file never panics the conversion,
// and a refusal never shows the password.
func FuzzDSNFromURL(f *testing.F) {
	f.Add("mysql://u:pw@h:3306/db?tls=true")
	f.Add("mariadb://u:pw@/db")
	f.Add("mysql://u:secretpw@h/db?x=%zz")
	f.Add("mysql://u:secretpw@h/db?tls=bogus")
	f.Add("mysql://u:secretpw@h:notaport/db")
	f.Fuzz(func(t *testing.T, s string) {
		_, err := DSNFromURL(s)
		if err != nil && strings.Contains(s, ":secretpw@") && strings.Contains(err.Error(), "secretpw") {
			t.Fatalf("refusal shows the password: %v", err)
		}
	})
}
