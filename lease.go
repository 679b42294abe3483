package mensageria

import "time"

// SettleMargin is the end of a lease the relay keeps for recording what a
// batch's deliveries did: a tenth of the lease, and at least half a second
// (a quarter of a lease under two seconds).
func SettleMargin(lease time.Duration) time.Duration { return settleMargin(lease) }

// DeliveryWindow is how long the deliveries of one claimed batch may take:
// the lease less its SettleMargin. The relay cancels a delivery still
// running then (and retries it), so a Sender's own timeout must not be
// longer: RelaySettings.DeliveryWindow hands it to the Senders, and the
// command's config refuses an http timeout beyond it.
func DeliveryWindow(lease time.Duration) time.Duration { return lease - settleMargin(lease) }

// settleMargin is the end of a lease kept for the settle: the deliveries'
// deadline is the lease less this. A tenth of the lease, and at least half
// a second (a quarter of a lease under two seconds): a settle's round trip
// on a loaded server, and a Kafka transaction's end (at least one round
// trip past the deadline), do not shrink with the lease. A tenth of a 2 s
// lease left 200 ms, and a relay under load settled 250 ms after a broker
// outage's deadline, past its lease.
func settleMargin(lease time.Duration) time.Duration {
	return max(lease/10, min(lease/4, 500*time.Millisecond))
}
