package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// rowSet is a set of outbox row ids (Delivery.Seq) kept as sorted,
// disjoint, inclusive ranges [lo1, hi1, lo2, hi2, ...]: a claimed batch is
// mostly consecutive ids, so a batch of hundreds is one or two ranges, and
// a lookup first checks the envelope [lo, hi], which rules out every batch
// but the ones it belongs to.
type rowSet []int64

// newRowSet builds the set of ids (in any order, duplicates allowed).
func newRowSet(ids []int64) rowSet {
	s := slices.Clone(ids)
	slices.Sort(s)
	var rs rowSet
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

func (s rowSet) has(id int64) bool {
	if len(s) == 0 || id < s[0] || id > s[len(s)-1] {
		return false
	}
	// The first range whose hi is ≥ id holds it if its lo is ≤ id.
	i := sort.Search(len(s)/2, func(k int) bool { return s[2*k+1] >= id })
	return i < len(s)/2 && s[2*i] <= id
}

// overlaps reports whether s and o share an id.
func (s rowSet) overlaps(o rowSet) bool {
	if len(s) == 0 || len(o) == 0 || s[len(s)-1] < o[0] || o[len(o)-1] < s[0] {
		return false
	}
	for i, j := 0, 0; i < len(s) && j < len(o); {
		switch {
		case s[i+1] < o[j]:
			i += 2
		case o[j+1] < s[i]:
			j += 2
		default:
			return true
		}
	}
	return false
}

// positions is the rolling window of outbox rows committed to Kafka by one
// transactional id: the row ids of its last few transactions. A set, not a
// high-water mark, because outbox ids commit out of order and a batch need
// not be contiguous. It changes in place only once a transaction committed.
type positions struct {
	max     int
	batches []rowSet // oldest first
}

func newPositions(max int) *positions { return &positions{max: max} }

func (p *positions) has(id int64) bool {
	for _, b := range p.batches {
		if b.has(id) {
			return true
		}
	}
	return false
}

// overlaps reports whether any row of set was committed in the window.
func (p *positions) overlaps(set rowSet) bool {
	for _, b := range p.batches {
		if b.overlaps(set) {
			return true
		}
	}
	return false
}

// encodeWith returns the record value of the window as it will be once
// batch commits; p is left as it is.
func (p *positions) encodeWith(batch rowSet) []byte {
	keep := p.batches
	if over := len(keep) + 1 - p.max; over > 0 {
		keep = keep[over:]
	}
	return encodeBatches(append(slices.Clone(keep), batch))
}

// add records a committed batch, dropping the oldest beyond the window.
func (p *positions) add(batch rowSet) {
	p.batches = append(p.batches, batch)
	if over := len(p.batches) - p.max; over > 0 {
		p.batches = slices.Delete(p.batches, 0, over)
	}
}

// encode is the record value of the window as it is.
func (p *positions) encode() []byte { return encodeBatches(p.batches) }

func encodeBatches(bs []rowSet) []byte {
	rec := positionRecord{Version: 1, Batches: make([][]int64, len(bs))}
	for i, b := range bs {
		rec.Batches[i] = b
	}
	v, _ := json.Marshal(rec) // ints only; cannot fail
	return v
}

// positionRecord is the value stored under the transactional id. Ranges
// keep it small: a claimed batch is mostly consecutive row ids.
type positionRecord struct {
	Version int `json:"v"`
	// Batches holds each transaction's rows as sorted, disjoint, inclusive
	// ranges [lo1, hi1, lo2, hi2, ...].
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
		if len(rs) == 0 || len(rs)%2 != 0 {
			return nil, errors.New("a batch must be a non-empty list of lo, hi pairs")
		}
		for i := 0; i < len(rs); i += 2 {
			// Each range in order, and apart from the one before it:
			// what has() and overlaps() rely on.
			if rs[i] < 1 {
				return nil, errors.New("outbox row ids start at 1")
			}
			if rs[i+1] < rs[i] || (i > 0 && rs[i] <= rs[i-1]) {
				return nil, errors.New("ranges must be ascending and disjoint")
			}
		}
		p.add(rowSet(rs))
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
