package serverport

import (
	"net"
	"strconv"
	"testing"
)

// The port is free: a listener can take it.
func TestFreeIsFreeAndBelowTheEphemeralRange(t *testing.T) {
	port, err := Free()
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
