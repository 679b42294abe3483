package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// The benchmarks compare the Kafka modes against a kfake cluster in two
// places: in the benchmark's own process (sharing its scheduler and heap,
// no real network) and in a process of its own on loopback, where the
// costs a real cluster shows across the network (the producer's linger
// among them) show too. The second is what decides whether the
// idempotent path keeps up with the transactional one.

// Kafka cluster kinds for the benchmarks.
const (
	KafkaInProcess = "in-process"
	KafkaProcess   = "process"
)

// kfakeBrokers and kfakePartitions shape every benchmark cluster.
const (
	kfakeBrokers    = 3
	kfakePartitions = 6
)

// NewKfakeCluster is the in-process benchmark cluster.
func NewKfakeCluster() (*kfake.Cluster, error) {
	return kfake.NewCluster(kfake.NumBrokers(kfakeBrokers), kfake.DefaultNumPartitions(kfakePartitions), kfake.AllowAutoTopicCreation())
}

// ServeKfake runs the benchmark cluster in this process for another one
// (a KfakeProcess): it prints the brokers' addresses, comma separated, on
// one line of out, then serves until in is closed or reaches its end, so
// that the cluster never outlives the process that started it.
func ServeKfake(in io.Reader, out io.Writer) error {
	c, err := NewKfakeCluster()
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := fmt.Fprintln(out, strings.Join(c.ListenAddrs(), ",")); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// KfakeProcess is a benchmark cluster run by another process: a program
// that calls ServeKfake (the internal/bench/kfake command, or
// 'mensageria bench --serve-kfake').
type KfakeProcess struct {
	Brokers []string
	cmd     *exec.Cmd
	stdin   io.Closer
}

// StartKfakeProcess starts name with args and waits for the addresses it
// prints. Stop ends it; so does this process's exit, which closes its
// standard input.
func StartKfakeProcess(ctx context.Context, name string, args ...string) (*KfakeProcess, error) {
	cmd := exec.Command(name, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start the Kafka cluster process %s: %w", name, err)
	}
	p := &KfakeProcess{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	select {
	case l, ok := <-line:
		if !ok || l == "" {
			p.Stop()
			return nil, errors.New("bench: the Kafka cluster process printed no brokers")
		}
		p.Brokers = strings.Split(l, ",")
		return p, nil
	case <-ctx.Done():
		p.Stop()
		return nil, fmt.Errorf("bench: the Kafka cluster process did not print its brokers: %w", ctx.Err())
	}
}

// Stop ends the process and waits for it.
func (p *KfakeProcess) Stop() {
	_ = p.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = p.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}
