package mensageria

import "github.com/xadm/mensageria/internal/testsignal"

// enableTestSignals turns on the signals of the relay c starts next.
func (c *Client) enableTestSignals() *testsignal.Relay {
	s := &testsignal.Relay{}
	s.Init()
	c.mu.Lock()
	c.signals = s
	c.mu.Unlock()
	return s
}

func init() {
	testsignal.ForClient = func(client any) *testsignal.Relay { return client.(*Client).enableTestSignals() }
}
