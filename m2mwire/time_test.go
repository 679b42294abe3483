package m2mwire

import (
	"testing"
	"time"
)

func TestTimeRoundTrip(t *testing.T) {
	in := time.Date(2026, 11, 30, 9, 0, 0, 123456789, time.FixedZone("BRT", -3*3600))
	got, err := ParseTime(string(AppendTime(nil, in)))
	if err != nil || !got.Equal(in) || got.Location() != time.UTC {
		t.Fatalf("round trip of %v: %v, %v", in, got, err)
	}
	for _, bad := range []string{"", "yesterday", "2026-11-30", "0000-01-01T00:00:00+01:00", "9999-12-31T23:00:00-02:00"} {
		if _, err := ParseTime(bad); err == nil {
			t.Errorf("ParseTime(%q) accepted", bad)
		}
	}
	if _, err := ParseTime("0001-01-01T00:00:00Z"); err != nil {
		t.Errorf("year 1: %v", err)
	}
}

func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-30T12:00:00.5Z", "0000-01-01T00:00:00+01:00", "9999-12-31T23:59:59.999999999-23:59", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseTime(s)
		if err != nil {
			return
		}
		again, err := ParseTime(string(AppendTime(nil, v)))
		if err != nil || !again.Equal(v) {
			t.Fatalf("%q → %v → %v, %v", s, v, again, err)
		}
	})
}
