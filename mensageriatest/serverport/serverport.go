// Package serverport finds the TCP port of a private database server that
// tests kill and start again (mensageriatest/pgserver,
// driver/mysql/mysqltest).
package serverport

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// Free returns a free port of 127.0.0.1 below the kernel's range of
// ephemeral ports: while the server is down between a kill and its
// restart, no outgoing connection of another program can be given its
// port. On a kernel whose ephemeral range starts unusually low it takes
// an ephemeral port and accepts that risk.
func Free() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const first = 15000
	if low <= first+1000 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		defer l.Close()
		return l.Addr().(*net.TCPAddr).Port, nil
	}
	for range 200 {
		port := first + rand.IntN(low-first)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, errors.New("serverport: no free port found")
}
