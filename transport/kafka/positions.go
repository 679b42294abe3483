package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
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

// union returns the ids of s and o together, as ranges (adjacent ones
// joined).
func union(s, o rowSet) rowSet {
	out := make(rowSet, 0, len(s)+len(o))
	push := func(lo, hi int64) {
		if n := len(out); n > 0 && lo <= out[n-1]+1 {
			out[n-1] = max(out[n-1], hi)
			return
		}
		out = append(out, lo, hi)
	}
	i, j := 0, 0
	for i < len(s) || j < len(o) {
		if j >= len(o) || (i < len(s) && s[i] <= o[j]) {
			push(s[i], s[i+1])
			i += 2
		} else {
			push(o[j], o[j+1])
			j += 2
		}
	}
	return out
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

// positions is what one lane knows of the outbox rows committed to Kafka
// under its transactional id. A set, not a high-water mark, because outbox
// ids commit out of order and a batch need not be contiguous. It changes in
// place only once a transaction committed.
//
// Two horizons. The record written in every transaction holds the lane's
// last max batches, plus the batches it inherited from a predecessor (read
// back when the lane opened), carried until retain has passed: after a
// crash, the rows that may be committed and still unsettled are the
// predecessor's last batches, and they come back only when their lease
// runs out, while this relay may commit many batches of its own. In
// memory, every batch committed or inherited is remembered for retain, so
// a batch whose settle was lost is recognised however many batches commit
// before it comes back.
type positions struct {
	max    int
	retain time.Duration
	now    func() time.Time

	// writer is the outbox (and app) the records this lane writes name;
	// read is what the record it was opened with named.
	writer, read owner

	own          []rowSet // this lane's last max commits, oldest first
	carried      []rowSet // inherited when the lane opened
	carriedUntil time.Time
	recent       []stamped // every batch committed or inherited within retain, oldest first
}

// owner is the outbox a position record belongs to, and its app (for the
// operator reading an error). A zero Outbox is a record of an older
// version, or of a sender that was never told its outbox.
type owner struct {
	Outbox uuid.UUID
	App    string
}

// stamped is the union of the batches remembered from one bucket of time:
// lookups then cost a few buckets, not every batch of the last minutes.
type stamped struct {
	rows rowSet
	at   time.Time // the bucket's start
}

const bucket = time.Second

// maxCarried bounds the inherited batches a record carries: predecessors
// that each crashed within retain of the last add theirs.
const maxCarried = 64

func newPositions(max int, retain time.Duration) *positions {
	return &positions{max: max, retain: retain, now: time.Now}
}

func (p *positions) has(id int64) bool {
	for i := len(p.recent) - 1; i >= 0; i-- {
		if p.recent[i].rows.has(id) {
			return true
		}
	}
	return false
}

// overlaps reports whether any row of set was committed within retain.
func (p *positions) overlaps(set rowSet) bool {
	for i := len(p.recent) - 1; i >= 0; i-- {
		if p.recent[i].rows.overlaps(set) {
			return true
		}
	}
	return false
}

// encodeWith returns the record value as it will be once batch commits; p
// is left as it is.
func (p *positions) encodeWith(batch rowSet) []byte {
	keep := p.own
	if over := len(keep) + 1 - p.max; over > 0 {
		keep = keep[over:]
	}
	return p.encodeRecord(append(slices.Clone(keep), batch))
}

// add records a committed batch and forgets what retain has passed.
func (p *positions) add(batch rowSet) {
	now := p.now()
	p.own = append(p.own, batch)
	if over := len(p.own) - p.max; over > 0 {
		p.own = slices.Delete(p.own, 0, over)
	}
	p.remember(batch, now)
	p.expire(now)
}

func (p *positions) remember(rows rowSet, now time.Time) {
	if len(rows) == 0 {
		return
	}
	if n := len(p.recent); n > 0 && now.Sub(p.recent[n-1].at) < bucket {
		b := p.recent[n-1].rows
		if rows[0] > b[len(b)-1]+1 {
			// The usual case: newer rows than any before. The bucket
			// owns its slice (cloned below), so it may grow in place.
			p.recent[n-1].rows = append(b, rows...)
		} else {
			p.recent[n-1].rows = union(b, rows)
		}
		return
	}
	p.recent = append(p.recent, stamped{slices.Clone(rows), now})
}

func (p *positions) expire(now time.Time) {
	cut := 0
	for cut < len(p.recent) && now.Sub(p.recent[cut].at) > p.retain {
		cut++
	}
	p.recent = slices.Delete(p.recent, 0, cut)
	if len(p.carried) > 0 && !now.Before(p.carriedUntil) {
		p.carried = nil
	}
}

// inherit takes what a lane knew before it was reopened in this process:
// its memory, and what it carried.
func (p *positions) inherit(old *positions) {
	if old == nil {
		return
	}
	p.recent = append(slices.Clone(old.recent), p.recent...)
	p.expire(p.now())
}

// encode is the record value as it is.
func (p *positions) encode() []byte { return p.encodeRecord(p.own) }

func (p *positions) encodeRecord(own []rowSet) []byte {
	rec := positionRecord{Version: 2, Batches: asInts(own)}
	if p.writer.Outbox != uuid.Nil {
		rec.Version, rec.Outbox, rec.App = 3, p.writer.Outbox.String(), p.writer.App
	}
	if len(p.carried) > 0 && p.now().Before(p.carriedUntil) {
		rec.Carried = asInts(p.carried)
	}
	v, _ := json.Marshal(rec) // ints only; cannot fail
	return v
}

func asInts(bs []rowSet) [][]int64 {
	out := make([][]int64, len(bs))
	for i, b := range bs {
		out[i] = b
	}
	return out
}

// positionRecord is the value stored under the transactional id. Ranges
// keep it small: a claimed batch is mostly consecutive row ids.
type positionRecord struct {
	Version int `json:"v"`
	// Outbox is the id of the outbox whose rows the batches are (version
	// 3): row ids of two outboxes overlap, so a record is only ever read
	// against its own outbox's rows. App is that outbox's relaying app.
	Outbox string `json:"outbox,omitempty"`
	App    string `json:"app,omitempty"`
	// Batches holds the lane's last transactions, oldest first, each as
	// sorted, disjoint, inclusive ranges [lo1, hi1, lo2, hi2, ...].
	Batches [][]int64 `json:"batches"`
	// Carried holds batches inherited from a predecessor (version 2).
	Carried [][]int64 `json:"carried,omitempty"`
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

// decodePositions reads a lane's record as a successor does: every batch
// in it, the lane's own and the ones it carried, is inherited, remembered
// and carried on for retain; the outbox it names is p.read. Records of
// version 1 (no carried batches) and 2 (no outbox) are read too.
func decodePositions(max int, retain time.Duration, b []byte) (*positions, error) {
	p := newPositions(max, retain)
	rec, err := parseRecord(b)
	if err != nil {
		return nil, err
	}
	if rec == nil { // a tombstone: nothing is remembered
		return p, nil
	}
	if p.read, err = rec.owner(); err != nil {
		return nil, err
	}
	inherited := append(rec.Carried, rec.Batches...)
	if over := len(inherited) - maxCarried; over > 0 {
		inherited = inherited[over:] // the oldest go first
	}
	now := p.now()
	for _, rs := range inherited {
		if err := validRanges(rs); err != nil {
			return nil, err
		}
		p.carried = append(p.carried, rowSet(rs))
		p.remember(rowSet(rs), now)
	}
	p.carriedUntil = now.Add(retain)
	return p, nil
}

// parseRecord checks a record's version and fields; nil for a tombstone.
func parseRecord(b []byte) (*positionRecord, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var rec positionRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	switch rec.Version {
	case 1:
		if rec.Carried != nil {
			return nil, errors.New("a version 1 record carries no batches")
		}
		fallthrough
	case 2:
		if rec.Outbox != "" || rec.App != "" {
			return nil, fmt.Errorf("a version %d record names no outbox", rec.Version)
		}
	case 3:
		if _, err := rec.owner(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown version %d", rec.Version)
	}
	return &rec, nil
}

// owner is the outbox a parsed record belongs to.
func (rec *positionRecord) owner() (owner, error) {
	if rec.Version < 3 {
		return owner{}, nil
	}
	id, err := uuid.Parse(rec.Outbox)
	if err != nil || id == uuid.Nil || len(rec.Outbox) != 36 {
		return owner{}, errors.New("a version 3 record names its outbox by a UUID in canonical form")
	}
	return owner{Outbox: id, App: rec.App}, nil
}

// recordOwner reads only whose a record is, for the check made before
// registering the transactional id.
func recordOwner(b []byte) (owner, error) {
	rec, err := parseRecord(b)
	if err != nil || rec == nil {
		return owner{}, err
	}
	return rec.owner()
}

// validRanges checks what has() and overlaps() rely on: pairs, each range
// in order and apart from the one before it, of real row ids.
func validRanges(rs []int64) error {
	if len(rs) == 0 || len(rs)%2 != 0 {
		return errors.New("a batch must be a non-empty list of lo, hi pairs")
	}
	for i := 0; i < len(rs); i += 2 {
		if rs[i] < 1 {
			return errors.New("outbox row ids start at 1")
		}
		if rs[i+1] < rs[i] || (i > 0 && rs[i] <= rs[i-1]) {
			return errors.New("ranges must be ascending and disjoint")
		}
	}
	return nil
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
