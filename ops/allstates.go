package ops

import "context"

// Messages lists one page of the scope's messages in every state: pending
// (in flight and scheduled included), delivered (until the purge deletes
// them; a relay that keeps no delivered rows leaves none), dead and in
// doubt, each with its State. DeadLetters and InDoubt list what awaits an
// operator; Messages is for a caller that checks how every message of a
// type ended, such as a run that audits its own deliveries.
func (o *Ops) Messages(ctx context.Context, p ListParams) (*Page, error) {
	return o.list(ctx, "", p)
}
