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
// batch need not be contiguous.
type positions struct {
	max     int
	batches [][]int64 // oldest first
	seen    map[int64]struct{}
}

func newPositions(max int) *positions {
	return &positions{max: max, seen: map[int64]struct{}{}}
}

func (p *positions) has(seq int64) bool {
	_, ok := p.seen[seq]
	return ok
}

// with returns the window as it will be once batch commits, leaving p as it
// is: the record is written inside the transaction, and p must only change
// once that transaction did commit.
func (p *positions) with(batch []int64) *positions {
	n := &positions{max: p.max, seen: make(map[int64]struct{}, len(p.seen)+len(batch))}
	n.batches = append(n.batches, p.batches...)
	n.batches = append(n.batches, batch)
	if over := len(n.batches) - n.max; over > 0 {
		n.batches = n.batches[over:]
	}
	for _, b := range n.batches {
		for _, s := range b {
			n.seen[s] = struct{}{}
		}
	}
	return n
}

// positionRecord is the value stored under the transactional id. Ranges
// keep it small: a claimed batch is mostly consecutive row ids.
type positionRecord struct {
	Version int `json:"v"`
	// Batches holds each batch as [lo1, hi1, lo2, hi2, ...], inclusive.
	Batches [][]int64 `json:"batches"`
}

func (p *positions) encode() []byte {
	rec := positionRecord{Version: 1, Batches: make([][]int64, 0, len(p.batches))}
	for _, b := range p.batches {
		s := slices.Clone(b)
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
		rec.Batches = append(rec.Batches, rs)
	}
	b, _ := json.Marshal(rec) // ints only; cannot fail
	return b
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
	for _, rs := range rec.Batches {
		if len(rs)%2 != 0 {
			return nil, errors.New("odd range list")
		}
		var batch []int64
		for i := 0; i < len(rs); i += 2 {
			if rs[i+1]-rs[i] > 1<<20 {
				return nil, errors.New("range too wide")
			}
			for s := rs[i]; s <= rs[i+1]; s++ {
				batch = append(batch, s)
			}
		}
		p.batches = append(p.batches, batch)
	}
	// Keep the newest; a smaller Window than the writer's is honoured.
	if over := len(p.batches) - max; over > 0 {
		p.batches = p.batches[over:]
	}
	for _, b := range p.batches {
		for _, s := range b {
			p.seen[s] = struct{}{}
		}
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
