package verdict

import (
	"slices"
	"testing"
)

// base is a clean run of two apps: a's ordered key k with two messages,
// b's one message, which its receiver may refuse for good.
func base() *History {
	return &History{
		Owner:   map[string]string{"a.seq": "a", "b.poke": "b"},
		Ordered: map[string]bool{"a.seq": true},
		Messages: []Message{
			{N: 1, Type: "a.seq", Key: "k", Index: 0},
			{N: 2, Type: "a.seq", Key: "k", Index: 1},
			{N: 3, Type: "b.poke", Key: "x", MayEndDead: true},
		},
		Claims: []Claim{
			{N: 1, Type: "a.seq", Apps: []string{"a"}, Ref: "relay a/0 claimed it"},
			{N: 2, Type: "a.seq", Apps: []string{"a", "a"}, Ref: "relay a/1 sent it to a's receiver"},
			{N: 3, Type: "b.poke", Apps: []string{"b"}, Ref: "relay b/0 claimed it"},
		},
		Effects: []Effect{{Seq: 10, N: 1}, {Seq: 11, N: 2}, {Seq: 12, N: 3}},
	}
}

func TestJudge(t *testing.T) {
	tests := []struct {
		name   string
		change func(h *History)
		want   []Violation
	}{
		{"clean", func(*History) {}, nil},
		{"clean: a message that may end dead, parked", func(h *History) {
			h.Effects = h.Effects[:2]
			h.Dead = []int64{3}
		}, nil},
		{"lost: never applied", func(h *History) {
			h.Effects = h.Effects[1:]
			h.Pending = []int64{1}
		}, []Violation{{Lost, 1, "committed but never applied (dead false, pending at the end true)"}}},
		{"lost: parked as dead, which it may not be", func(h *History) {
			h.Effects = h.Effects[1:]
			h.Dead = []int64{1}
		}, []Violation{{Lost, 1, "committed but never applied (dead true, pending at the end false)"}}},
		{"lost: neither applied nor parked", func(h *History) {
			h.Effects = h.Effects[:2]
		}, []Violation{{Lost, 3, "committed but neither applied nor parked as dead (pending at the end: false)"}}},
		{"duplicate effect", func(h *History) {
			h.Effects = append(h.Effects, Effect{Seq: 13, N: 3})
		}, []Violation{{DuplicateEffect, 3, "applied 2 times (effects [12 13])"}}},
		{"foreign claim: the claiming relay", func(h *History) {
			h.Claims = append(h.Claims, Claim{N: 3, Type: "b.poke", Apps: []string{"a"}, Ref: "relay a/0 claimed it"})
		}, []Violation{{ForeignClaim, 3, `type b.poke belongs to app "b" but relay a/0 claimed it`}}},
		{"foreign claim: the receiving endpoint, reported once", func(h *History) {
			h.Claims[0].Apps = []string{"b", "b"}
		}, []Violation{{ForeignClaim, 1, `type a.seq belongs to app "a" but relay a/0 claimed it`}}},
		{"foreign claim: a row of a type no running app owns", func(h *History) {
			h.Owner["c.stock"] = "c"
			h.Claims = append(h.Claims, Claim{N: 9, Type: "c.stock", Apps: []string{"a"}, Ref: "it was attempted"})
		}, []Violation{{ForeignClaim, 9, `type c.stock belongs to app "c" but it was attempted`}}},
		{"order", func(h *History) {
			h.Effects[0].Seq, h.Effects[1].Seq = h.Effects[1].Seq, h.Effects[0].Seq
		}, []Violation{{Order, 1, "key a.seq/k: message #0 applied after #1"}}},
		{"order: an unordered type may be applied in any order", func(h *History) {
			h.Ordered = nil
			h.Effects[0].Seq, h.Effects[1].Seq = h.Effects[1].Seq, h.Effects[0].Seq
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := base()
			tt.change(h)
			v := Judge(h)
			if !slices.Equal(v.Violations, tt.want) {
				t.Fatalf("violations:\n got %v\nwant %v", v.Violations, tt.want)
			}
			if v.OK() != (len(tt.want) == 0) {
				t.Fatalf("OK() = %v with %d violations", v.OK(), len(tt.want))
			}
			for _, w := range tt.want {
				if v.Count(w.Kind) != 1 {
					t.Fatalf("Count(%s) = %d, want 1", w.Kind, v.Count(w.Kind))
				}
			}
		})
	}
}

func TestJudgeCountsEffects(t *testing.T) {
	h := base()
	h.Effects = append(h.Effects, Effect{Seq: 13, N: 3})
	v := Judge(h)
	if v.Applied[1] != 1 || v.Applied[3] != 2 || v.Applied[4] != 0 {
		t.Fatalf("Applied = %v", v.Applied)
	}
}
