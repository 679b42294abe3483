package serverproc

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
)

// The port is free: a listener can take it.
func TestFreePortIsFree(t *testing.T) {
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if port < 1024 || port >= 65536 {
		t.Fatalf("port %d out of range", port)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("port %d is not free: %v", port, err)
	}
	_ = l.Close()
}

// A start that fails is tried again on other ports, five times in all,
// and the ports of one try are distinct.
func TestOnFreePortsTriesFiveTimes(t *testing.T) {
	taken := errors.New("port taken")
	var tries [][]int
	err := OnFreePorts(context.Background(), 2, func(ports []int) error {
		tries = append(tries, ports)
		return taken
	})
	if !errors.Is(err, taken) || len(tries) != 5 {
		t.Fatalf("%d tries, error %v; want 5 and the last start's error", len(tries), err)
	}
	for _, p := range tries {
		if len(p) != 2 || p[0] == p[1] {
			t.Fatalf("ports %v: want two distinct ones", p)
		}
	}

	tries = nil
	err = OnFreePorts(context.Background(), 1, func(ports []int) error {
		tries = append(tries, ports)
		if len(tries) < 3 {
			return taken
		}
		return nil
	})
	if err != nil || len(tries) != 3 {
		t.Fatalf("%d tries, error %v; want 3 and nil", len(tries), err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tries = nil
	err = OnFreePorts(ctx, 1, func(ports []int) error {
		tries = append(tries, ports)
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) || len(tries) != 1 {
		t.Fatalf("%d tries, error %v; want 1 once ctx is done", len(tries), err)
	}
}
