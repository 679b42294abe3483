package bench

import (
	"errors"
	"testing"
)

func TestAlternateRotatesAndTakesMedians(t *testing.T) {
	var order []string
	calls := map[string]float64{}
	got, err := Alternate(3, []string{"a", "b"}, func(mode string) (Result, error) {
		order = append(order, mode)
		calls[mode]++
		r := Result{Scenario: mode}
		// a: 1, 2, 3 → median 2; b: 10, 20, 30 → 20, whatever the order.
		r.Set("v", calls[mode]*map[string]float64{"a": 1, "b": 10}[mode])
		return r, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a", "b", "b", "a", "a", "b"}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("run order %v, want %v", order, want)
		}
	}
	if got["a"]["v"] != 2 || got["b"]["v"] != 20 {
		t.Errorf("medians %v, want a=2 b=20", got)
	}
}

func TestAlternateStopsAtFirstError(t *testing.T) {
	boom := errors.New("boom")
	n := 0
	_, err := Alternate(3, []string{"a", "b"}, func(string) (Result, error) {
		n++
		return Result{}, boom
	})
	if !errors.Is(err, boom) || n != 1 {
		t.Errorf("err %v after %d runs, want boom after 1", err, n)
	}
}
