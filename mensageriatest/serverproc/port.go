// Package serverproc runs the process of a private database server for
// tests that crash, stop and start it again (mensageriatest/pgserver,
// driver/mysql/mysqltest): a temporary directory of its own, a free port
// of 127.0.0.1 kept across restarts, the process started and waited for
// until it accepts connections, ended with the signal that means a crash
// or a clean shutdown to that server, and the directory removed at the
// end. What a server is (its programs, its data directory, its settings,
// how a client connects) stays with its own package.
//
// It is public because the MySQL driver's module starts such a server
// too, and may import no internal package of the core.
package serverproc

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
)

// ErrDown is returned by the methods that need a running server.
var ErrDown = errors.New("serverproc: the server is not running")

// FreePort returns a free port of 127.0.0.1 below the kernel's range of
// ephemeral ports: while the server is down between a kill and its
// restart, no outgoing connection of another program can be given its
// port. On a kernel whose ephemeral range starts unusually low it takes
// an ephemeral port and accepts that risk.
func FreePort() (int, error) {
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
	return 0, errors.New("serverproc: no free port found")
}

// OnFreePorts calls start with n distinct free ports (FreePort) until it
// succeeds, five times at most: between FreePort and the server's bind,
// another program may take a port. It returns start's last error, or
// ctx's once that is done.
func OnFreePorts(ctx context.Context, n int, start func(ports []int) error) error {
	var lastErr error
	for range 5 {
		ports := make([]int, 0, n)
		for len(ports) < n {
			port, err := FreePort()
			if err != nil {
				return err
			}
			if !slices.Contains(ports, port) {
				ports = append(ports, port)
			}
		}
		if lastErr = start(ports); lastErr == nil || ctx.Err() != nil {
			return lastErr
		}
	}
	return lastErr
}
