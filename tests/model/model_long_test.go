//go:build modellong

package model

import (
	"testing"
	"time"
)

// The longer bounds run only in a build that asks for them (`make
// model-long`: minutes and a few GB), so that `make test` has no test that
// skips itself for want of a variable.

// The longer bounds of `make model-long` (built with -tags modellong).
var long = []check{
	{Name: "plain sender, 3 messages", Defines: []string{"-DN=3"}, Big: true},
	{Name: "plain sender, 3 relays", Defines: []string{"-DR=3"}, Big: true},
	{Name: "plain sender, lease and backoff of 2 ticks", Defines: []string{"-DLEASE=2", "-DDELAY=2"}, Big: true},
	{Name: "plain sender, 2 of each fault", Defines: []string{"-DCRASHES=2", "-DSTOPS=2", "-DSESSIONLOSS=2", "-DSETTLEFAILS=2"}, Big: true},
	{Name: "plain sender, unordered, 3 messages", Defines: []string{"-DUNORDERED", "-DN=3", "-DSTOPS=0", "-DSETTLEFAILS=0"}, Big: true},
	{Name: "plain sender, attempts counted", Defines: []string{"-DATTEMPTS"}, Big: true},
	{Name: "election none, 3 messages", Defines: []string{"-DNOELECTION", "-DN=3"}, Big: true},
	{Name: "kafka transactional, 2 messages", Defines: []string{"-DKAFKA"}, Big: true},
	{Name: "kafka transactional, unordered, 2 messages", Defines: []string{"-DKAFKA", "-DUNORDERED"}, Big: true},
	{Name: "kafka transactional, 3 relays", Defines: []string{"-DKAFKA", "-DN=1", "-DR=3"}, Big: true},
	{Name: "kafka transactional, 2 kafka faults", Defines: []string{"-DKAFKA", "-DN=1", "-DKFAULTS=2"}, Big: true},
	{Name: "liveness, plain sender, every fault", Defines: []string{"-DLIVE"}, Live: true, Big: true},
	{Name: "liveness, kafka transactional, 2 messages", Defines: []string{"-DLIVE", "-DKAFKA"}, Live: true, Big: true},
}

func TestModelLong(t *testing.T) {
	tools(t)
	for _, c := range long {
		t.Run(c.Name, func(t *testing.T) {
			run(t, c, 30*time.Minute)
		})
	}
}
