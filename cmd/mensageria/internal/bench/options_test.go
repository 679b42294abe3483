package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The command's defaults run; each option the scenarios cannot run with
// is refused, naming its flag; the peers follow --peer and
// --river-tuning.
func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	for _, tc := range []struct {
		name string
		set  func(*Options)
		want string
	}{
		{"unknown cluster", func(o *Options) { o.KafkaClusters = []string{"remote"} }, `--kafka-cluster "remote": use process or in-process`},
		{"no cluster", func(o *Options) { o.KafkaClusters = nil }, "--kafka-cluster: name at least one of process, in-process"},
		{"claim of 0", func(o *Options) { o.KafkaClaims = []int{0} }, "--kafka-claims 0: 1..10000"},
		{"unknown scenario", func(o *Options) { o.Scenarios = []string{"drain", "soak"} }, `--scenario "soak": use drain, steady,`},
		{"few broker messages", func(o *Options) { o.BrokerMessages = 99 }, "--broker-messages 99: at least 100"},
		{"batch over the messages", func(o *Options) { o.BrokerMessages, o.Batch = 100, 101 }, "--batch 101: 1..--broker-messages"},
		{"no round", func(o *Options) { o.Rounds = 0 }, "--rounds 0: at least 1"},
		{"short paced run", func(o *Options) { o.PacedFor = time.Millisecond }, "--paced-for 1ms: at least 100ms"},
		{"short check", func(o *Options) { o.CheckFor = time.Millisecond }, "--check-for 1ms: at least 100ms"},
		{"no stress rate", func(o *Options) { o.StressRate = 0 }, "--stress-rate 0 and --stress-readers 3: at least 1"},
		{"short stress phase", func(o *Options) { o.StressPhase = time.Millisecond }, "--stress-phase 1ms"},
		{"short stress lease", func(o *Options) { o.StressLease = 10 * time.Millisecond }, "--stress-lease 10ms: at least 1s"},
		{"short tax run", func(o *Options) { o.TaxRun = time.Millisecond }, "--tax-run 1ms"},
		{"other peer", func(o *Options) { o.Peer = "sidekiq" }, `--peer "sidekiq": the peer is river`},
		{"other tuning", func(o *Options) { o.Peer, o.RiverTuning = PeerRiver, "fast" }, `--river-tuning "fast": use both, default or tuned`},
		{"outbox setting", func(o *Options) { o.StressOutbox = []string{"fillfactor=1);--"} }, "--stress-outbox-set: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions()
			tc.set(&o)
			if err := o.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error saying %q", err, tc.want)
			}
		})
	}
	o := DefaultOptions()
	if p, err := o.Peers(); err != nil || p != nil {
		t.Fatalf("no --peer: %v, %v", p, err)
	}
	o.Peer = PeerRiver
	for tuning, want := range map[string][]string{"both": {PeerRiver, PeerRiverTuned}, "default": {PeerRiver}, "tuned": {PeerRiverTuned}} {
		o.RiverTuning = tuning
		if p, err := o.Peers(); err != nil || !slices.Equal(p, want) {
			t.Errorf("--river-tuning %s: %v, %v; want %v", tuning, p, err, want)
		}
	}
	o.Scenarios = []string{"drain", "tax", "console"}
	if got := o.peerScenarios(); !slices.Equal(got, []string{"tax", "drain"}) {
		t.Errorf("peerScenarios = %v, want tax and drain in PeerScenarios' order", got)
	}
	if o.OwnDatabase() {
		t.Error("drain brings no database of its own")
	}
	o.Scenarios = []string{"stress-sqlite"}
	if !o.OwnDatabase() {
		t.Error("stress-sqlite brings its own database")
	}
}
