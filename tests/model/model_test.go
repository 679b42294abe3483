package model

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xadm/mensageria/internal/testdb"
)

// modelFile is the model, relative to this package.
const modelFile = "../../docs/model/delivery.pml"

// The assertions of the model, by the property they check, as pan prints
// them when they fail.
const (
	propStaleSettle = "assertion violated ((tok[i]==(me+1))&&(lease[i]>0))"   // no settle by a relay whose lease passed
	propOneEpoch    = "assertion violated (myep>=claimedEpoch)"               // at most one epoch claims at a time
	propKeyOrder    = "assertion violated (got[j]||(st[j]==2))"               // per-key order
	propProduced    = "assertion violated (kcommitted[i]<=1)"                 // no row produced twice into Kafka
	propNotLost     = "assertion violated got[i]"                             // nothing marked delivered that was not
	propLiveness    = "acceptance cycle"                                      // every message ends delivered or dead
	propOnce        = "assertion violated ((applied[0]<=1)&&(applied[1]<=1))" // at-most-once: no effect applied twice (N=2)
)

// check is one run of the checker: the model compiled with Defines.
type check struct {
	Name    string
	Defines []string
	// Live checks the liveness property under weak fairness instead of
	// the safety properties.
	Live bool
	// Want is "" for a model that must pass, else the violation pan must
	// report.
	Want string
	// Big is a run of millions of states.
	Big bool
}

// The bounded checks of `make test` and `make model`. docs/model/README.md
// gives their figures.
var bounded = []check{
	{Name: "plain sender", Defines: nil},
	{Name: "kafka transactional", Defines: []string{"-DKAFKA", "-DN=1", "-DSETTLEFAILS=0"}},
	{Name: "election none", Defines: []string{"-DNOELECTION"}},
	{Name: "liveness, plain sender", Defines: []string{"-DLIVE", "-DSTOPS=0", "-DCRASHES=0"}, Live: true},
	{Name: "liveness, kafka transactional", Defines: []string{"-DLIVE", "-DKAFKA", "-DN=1", "-DSTOPS=0", "-DSETTLEFAILS=0"}, Live: true},
	{Name: "at-most-once route", Defines: []string{"-DAMO"}},
}

// The deliberate bugs: each must make the checker fail, on the property
// it breaks.
var bugs = []check{
	{Name: "settle without lease check", Defines: []string{"-DBUG_SETTLE_WITHOUT_LEASE_CHECK"}, Want: propStaleSettle},
	{Name: "settle without token check", Defines: []string{"-DBUG_SETTLE_WITHOUT_TOKEN_CHECK"}, Want: propStaleSettle},
	{Name: "claim without fence", Defines: []string{"-DBUG_CLAIM_WITHOUT_FENCE"}, Want: propOneEpoch},
	// No fault is needed to break the order.
	{Name: "claim ignores order", Defines: []string{"-DBUG_CLAIM_IGNORES_ORDER", "-DCRASHES=0", "-DSTOPS=0", "-DSESSIONLOSS=0"}, Want: propKeyOrder},
	{Name: "kafka without reconcile", Defines: []string{"-DKAFKA", "-DN=1", "-DBUG_KAFKA_NO_RECONCILE"}, Want: propProduced},
	{Name: "kafka positions outside the transaction", Defines: []string{"-DKAFKA", "-DN=1", "-DBUG_KAFKA_POSITIONS_OUTSIDE_TXN"}, Want: propProduced},
	{Name: "kafka positions known before the commit", Defines: []string{"-DKAFKA", "-DN=1", "-DBUG_KAFKA_KNOWN_BEFORE_COMMIT"}, Want: propNotLost},
	{Name: "at-most-once: sent without a mark", Defines: []string{"-DAMO", "-DBUG_AMO_SEND_UNMARKED"}, Want: propOnce},
	{Name: "at-most-once: a marked row claimed again", Defines: []string{"-DAMO", "-DBUG_AMO_CLAIM_MARKED"}, Want: propOnce},
	{Name: "at-most-once: sent after the lease", Defines: []string{"-DAMO", "-DBUG_AMO_SEND_AFTER_LEASE"}, Want: propOnce},
	{Name: "a dead row blocks its key", Defines: []string{"-DLIVE", "-DSTOPS=0", "-DCRASHES=0", "-DBUG_DEAD_BLOCKS_KEY"}, Live: true, Want: propLiveness},
}

func TestModel(t *testing.T) {
	tools(t)
	for _, c := range bounded {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			run(t, c, 2*time.Minute)
		})
	}
}

// TestModelCatchesBugs shows the checker bites: each deliberate bug fails
// on the property it breaks (and the same model without the bug passes,
// in TestModel).
func TestModelCatchesBugs(t *testing.T) {
	tools(t)
	for _, c := range bugs {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			run(t, c, 2*time.Minute)
		})
	}
}

// tools finds SPIN and a C compiler: a failure when CI is set, where
// scripts/tools.sh must have installed them, a skip otherwise.
func tools(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			testdb.Unavailable(t, tool+" (scripts/tools.sh installs it; make services does)", err)
		}
	}
}

// hashBits sizes pan's hash table (2^n slots) to the longer bounds.
func (c check) hashBits() int {
	if c.Big {
		return 26
	}
	return 22
}

// result is what pan reported.
type result struct {
	Errors    int
	States    int64
	Depth     int
	Complete  bool   // the whole state space was searched
	Violation string // the first error pan reported, "" for none
	Output    string
}

func run(t *testing.T, c check, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	res, err := verify(t.TempDir(), c, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d states, depth %d, %d errors, %s", strings.Join(c.Defines, " "), res.States, res.Depth, res.Errors, time.Since(start).Round(10*time.Millisecond))
	if c.Want == "" {
		if res.Errors != 0 || !res.Complete {
			t.Fatalf("the model must pass with %v: errors %d, search complete %v, first error %q\n%s", c.Defines, res.Errors, res.Complete, res.Violation, res.Output)
		}
		return
	}
	if res.Errors == 0 {
		t.Fatalf("the bug %v was not caught: the checker found no error\n%s", c.Defines, res.Output)
	}
	if !strings.Contains(res.Violation, c.Want) {
		t.Fatalf("the bug %v was caught on %q, want %q\n%s", c.Defines, res.Violation, c.Want, res.Output)
	}
}

// verify generates, compiles and runs the verifier of c in dir.
func verify(dir string, c check, timeout time.Duration) (result, error) {
	src, err := os.ReadFile(modelFile)
	if err != nil {
		return result{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "delivery.pml"), src, 0o644); err != nil {
		return result{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	sh := func(name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil && ctx.Err() != nil {
			return string(out), fmt.Errorf("%s: not done within %s", name, timeout)
		}
		return string(out), err
	}
	if out, err := sh("spin", append(append([]string{"-a"}, c.Defines...), "delivery.pml")...); err != nil {
		return result{}, fmt.Errorf("spin -a %v: %v\n%s", c.Defines, err, out)
	}
	// -O0: the search is short, and compiling the verifier with
	// optimisation costs more than it saves.
	cc := []string{"-O0", "-w", "-o", "pan", "pan.c"}
	pan := []string{"-m100000", "-w" + strconv.Itoa(c.hashBits())}
	if c.Live {
		pan = append(pan, "-a", "-f")
	} else {
		cc = append([]string{"-DSAFETY"}, cc...)
	}
	if out, err := sh("gcc", cc...); err != nil {
		return result{}, fmt.Errorf("gcc %v: %v\n%s", cc, err, out)
	}
	out, err := sh("./pan", pan...)
	if err != nil {
		// pan exits non-zero on some errors; its report says which.
		if _, ok := err.(*exec.ExitError); !ok {
			return result{}, fmt.Errorf("pan: %v\n%s", err, out)
		}
	}
	return parse(out)
}

var (
	reErrors = regexp.MustCompile(`errors: (\d+)`)
	reStates = regexp.MustCompile(`(\d+) states, stored`)
	reDepth  = regexp.MustCompile(`depth reached (\d+)`)
	reFirst  = regexp.MustCompile(`(?m)^pan:\d+: (.*)$`)
)

// parse reads pan's report.
func parse(out string) (result, error) {
	res := result{Output: out}
	m := reErrors.FindStringSubmatch(out)
	if m == nil {
		return res, fmt.Errorf("pan printed no error count:\n%s", out)
	}
	res.Errors, _ = strconv.Atoi(m[1])
	if m := reStates.FindStringSubmatch(out); m != nil {
		res.States, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reDepth.FindStringSubmatch(out); m != nil {
		res.Depth, _ = strconv.Atoi(m[1])
	}
	if m := reFirst.FindStringSubmatch(out); m != nil {
		res.Violation = m[1]
	}
	res.Complete = !strings.Contains(out, "Search not completed") && !strings.Contains(out, "max search depth too small")
	return res, nil
}

// TestParse pins the reading of pan's report on one it printed.
func TestParse(t *testing.T) {
	out := `pan:1: assertion violated ((tok[i]==(me+1))&&(lease[i]>0)) (at depth 85)
pan: wrote delivery.pml.trail

(Spin Version 6.5.2 -- 6 December 2019)
Warning: Search not completed
	+ Partial Order Reduction

State-vector 68 byte, depth reached 85, errors: 1
        8 states, stored
`
	res, err := parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 1 || res.States != 8 || res.Depth != 85 || res.Complete || !strings.Contains(res.Violation, propStaleSettle) {
		t.Fatalf("parsed %+v", res)
	}
	if _, err := parse("spin: delivery.pml:12, Error: syntax error"); err == nil {
		t.Fatal("a report without an error count must be an error")
	}
}
