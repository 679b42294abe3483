package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// positions is the rolling window of outbox rows committed to Kafka by one
// transactional id: the row ids (Delivery.Seq) of the last few batches. A
// set, not a high-water mark, because outbox ids commit out of order and a
// batch need not be contiguous. It changes in place only once a
// transaction committed, and keeps each batch's encoding so that a commit
// costs its own batch, not the whole window.
type positions struct {
	max     int
	batches [][]int64 // oldest first
	ranges  [][]int64 // each batch as [lo1, hi1, lo2, hi2, ...]
	seen    map[int64]struct{}
}

func newPositions(max int) *positions {
	return &positions{max: max, seen: map[int64]struct{}{}}
}

func (p *positions) has(seq int64) bool {
	_, ok := p.seen[seq]
	return ok
}

// toRanges encodes a batch as inclusive ranges of consecutive ids.
func toRanges(batch []int64) []int64 {
	s := slices.Clone(batch)
	slices.Sort(s)
	var rs []int64
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] <= s[j]+1 {
			j++
		}
		rs = append(rs, s[i], s[j])
		i = j + 1
	}
	return rs
}

// encodeWith returns the record value of the window as it will be once
// batch commits, and the batch's ranges for add; p is left as it is.
func (p *positions) encodeWith(batch []int64) (ranges []int64, value []byte) {
	rs := toRanges(batch)
	keep := p.ranges
	if over := len(keep) + 1 - p.max; over > 0 {
		keep = keep[over:]
	}
	rec := positionRecord{Version: 1, Batches: append(slices.Clone(keep), rs)}
	value, _ = json.Marshal(rec) // ints only; cannot fail
	return rs, value
}

// add records a committed batch, dropping the oldest beyond the window.
func (p *positions) add(batch, ranges []int64) {
	p.batches = append(p.batches, batch)
	p.ranges = append(p.ranges, ranges)
	for _, s := range batch {
		p.seen[s] = struct{}{}
	}
	for len(p.batches) > p.max {
		for _, s := range p.batches[0] {
			delete(p.seen, s)
		}
		p.batches, p.ranges = p.batches[1:], p.ranges[1:]
	}
}

// encode is the record value of the window as it is.
func (p *positions) encode() []byte {
	b, _ := json.Marshal(positionRecord{Version: 1, Batches: p.ranges})
	return b
}

// positionRecord is the value stored under the transactional id. Ranges
// keep it small: a claimed batch is mostly consecutive row ids.
type positionRecord struct {
	Version int `json:"v"`
	// Batches holds each batch as [lo1, hi1, lo2, hi2, ...], inclusive.
	Batches [][]int64 `json:"batches"`
}

// PositionsError reports a position record this build cannot read. The
// sender refuses to run rather than produce batches it may have committed.
type PositionsError struct {
	Topic, Key string
	Err        error
}

func (e *PositionsError) Error() string {
	return fmt.Sprintf("mensageria/kafka: position record %q in topic %q: %v", e.Key, e.Topic, e.Err)
}

func (e *PositionsError) Unwrap() error { return e.Err }

func decodePositions(max int, b []byte) (*positions, error) {
	p := newPositions(max)
	if len(b) == 0 { // a tombstone: nothing is remembered
		return p, nil
	}
	var rec positionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	if rec.Version != 1 {
		return nil, fmt.Errorf("unknown version %d", rec.Version)
	}
	// Keep the newest; a smaller Window than the writer's is honoured.
	if over := len(rec.Batches) - max; over > 0 {
		rec.Batches = rec.Batches[over:]
	}
	for _, rs := range rec.Batches {
		if len(rs)%2 != 0 {
			return nil, errors.New("odd range list")
		}
		var batch []int64
		for i := 0; i < len(rs); i += 2 {
			if rs[i+1] < rs[i] || rs[i+1]-rs[i] > 1<<20 {
				return nil, errors.New("bad range")
			}
			for s := rs[i]; s <= rs[i+1]; s++ {
				batch = append(batch, s)
			}
		}
		p.add(batch, rs)
	}
	return p, nil
}

// ensureCompactedTopic creates the positions topic, compacted, when it is
// missing. An existing topic is left as it is.
func ensureCompactedTopic(ctx context.Context, cl *kgo.Client, topic string) error {
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = 1
	t.ReplicationFactor = -1
	for k, v := range map[string]string{"cleanup.policy": "compact"} {
		c := kmsg.NewCreateTopicsRequestTopicConfig()
		c.Name, c.Value = k, kmsg.StringPtr(v)
		t.Configs = append(t.Configs, c)
	}
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, rt := range resp.Topics {
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return err
		}
	}
	return nil
}

// readPositions returns the newest committed value of key in topic. It must
// run after the producer id was (re)initialised: that aborts any transaction
// a crashed predecessor left open, which would otherwise hold the last
// stable offset back until the transaction timeout.
func readPositions(ctx context.Context, opts []kgo.Opt, topic, key string) ([]byte, bool, error) {
	admin, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, false, err
	}
	defer admin.Close()
	ends, err := listOffsets(ctx, admin, topic, -1)
	if err != nil {
		return nil, false, err
	}
	firsts, err := listOffsets(ctx, admin, topic, -2)
	if err != nil {
		return nil, false, err
	}
	start := map[int32]kgo.Offset{}
	for p, end := range ends {
		if end > firsts[p] {
			start[p] = kgo.NewOffset().At(firsts[p])
		}
	}
	if len(start) == 0 {
		return nil, false, nil
	}
	// Control records are kept so the reader can tell it reached the end:
	// the last offset below the stable end is usually a commit marker,
	// which a read_committed reader would otherwise never see.
	cl, err := kgo.NewClient(append(slices.Clone(opts),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: start}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, false, err
	}
	defer cl.Close()
	var (
		val   []byte
		found bool
		left  = len(start)
		done  = map[int32]bool{}
	)
	for left > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = err })
		if ferr != nil {
			return nil, false, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() && string(r.Key) == key {
				val, found = r.Value, true
			}
			if !done[r.Partition] && r.Offset >= ends[r.Partition]-1 {
				done[r.Partition] = true
				left--
			}
		})
	}
	return val, found, nil
}

// listOffsets asks for the last stable offset (ts -1, read_committed) or the
// log start (ts -2) of every partition of topic.
func listOffsets(ctx context.Context, cl *kgo.Client, topic string, ts int64) (map[int32]int64, error) {
	return listOffsetsIso(ctx, cl, topic, ts, 1)
}

func listOffsetsIso(ctx context.Context, cl *kgo.Client, topic string, ts int64, iso int8) (map[int32]int64, error) {
	mreq := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	mreq.Topics = append(mreq.Topics, mt)
	mresp, err := mreq.RequestWith(ctx, cl)
	if err != nil {
		return nil, err
	}
	lreq := kmsg.NewPtrListOffsetsRequest()
	lreq.ReplicaID = -1
	lreq.IsolationLevel = iso
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	for _, t := range mresp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return nil, err
		}
		for _, p := range t.Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition = p.Partition
			lp.Timestamp = ts
			lp.CurrentLeaderEpoch = -1
			lt.Partitions = append(lt.Partitions, lp)
		}
	}
	lreq.Topics = append(lreq.Topics, lt)
	shards := cl.RequestSharded(ctx, lreq)
	out := map[int32]int64{}
	for _, sh := range shards {
		if sh.Err != nil {
			return nil, sh.Err
		}
		for _, t := range sh.Resp.(*kmsg.ListOffsetsResponse).Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, err
				}
				out[p.Partition] = p.Offset
			}
		}
	}
	return out, nil
}
