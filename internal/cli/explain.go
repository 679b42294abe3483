package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/xadm/mensageria"
	"github.com/xadm/mensageria/internal/guarantee"
)

type explainRoute struct {
	Type        string        `json:"type"`
	Destination string        `json:"destination"`
	Line        int           `json:"line"`
	Map         guarantee.Map `json:"guarantees"`
}

type explainOut struct {
	App      string         `json:"app"`
	Election string         `json:"election"`
	Routes   []explainRoute `json:"routes"`
}

func (a *app) explainCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Show what each route of the config guarantees, and where idempotency must defend",
		Long: `explain prints the guarantee map of the config: for every route its
transport, the level that holds on each hop (exactly-once into the outbox,
at-least-once to the destination, effectively-once through an inbox,
exactly-once inside Kafka) and the places where a duplicate can still
reach a side effect. It reads the config only; it never connects.`,
		Args: noArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := a.loadConfig()
			if err != nil {
				return err
			}
			out := explainOut{App: c.App, Election: electionName(c.Relay.Election)}
			for _, r := range c.Routes {
				m, ok := guarantee.For(r.Transport, guarantee.Options{Ordered: r.Ordered, NoElection: c.Relay.Election == mensageria.ElectionNone,
					KafkaTransactional: r.Kafka != nil && r.Kafka.TransactionalID != ""})
				if !ok {
					return fmt.Errorf("route %q: no guarantee map for transport %q", r.Type, r.Transport)
				}
				out.Routes = append(out.Routes, explainRoute{Type: r.Type, Destination: destination(r), Line: r.Line, Map: m})
			}
			if asJSON {
				enc := json.NewEncoder(a.io.Out)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			writeExplain(a.io.Out, c, out)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func electionName(e mensageria.Election) string {
	if e == mensageria.ElectionNone {
		return "none"
	}
	return "advisory"
}

func destination(r Route) string {
	switch r.Transport {
	case "http":
		return "POST " + r.HTTP.URL
	case "kafka":
		d := "topic " + r.Kafka.Topic + " on " + strings.Join(r.Kafka.Brokers, ",")
		if r.Kafka.TransactionalID != "" {
			d += " (transactional id " + r.Kafka.TransactionalID + ")"
		}
		return d
	case "nats":
		d := "subject " + r.NATS.Subject + " on " + r.NATS.URL
		if r.NATS.Stream != "" {
			d += " (stream " + r.NATS.Stream + ")"
		}
		return d
	}
	return r.Transport
}

func writeExplain(w io.Writer, c *Config, out explainOut) {
	head := fmt.Sprintf("app %s: %d route(s); election %s", out.App, len(out.Routes), out.Election)
	if out.Election == "advisory" {
		head += " (one active relay per app; a deposed leader is fenced out)."
	} else {
		head += " (every replica relays; claims stay disjoint through row locks and leases)."
	}
	fmt.Fprint(w, wrap("", "", head))
	fmt.Fprint(w, wrap("", "", "Nothing is dropped silently: a message is delivered, or parked as dead with its reason (a permanent refusal, or max attempts) for 'mensageria dead' to show, retry or discard."))
	for _, r := range out.Routes {
		m := r.Map
		fmt.Fprintf(w, "\nroute %s  (line %d)\n", r.Type, r.Line)
		fmt.Fprintf(w, "  transport   %s  %s\n", m.Transport, r.Destination)
		fmt.Fprintf(w, "  end to end  %s\n", strings.ToUpper(string(m.EndToEnd)))
		fmt.Fprint(w, wrap("  boundary    ", "              ", m.Boundary))
		if m.Ordering != "" {
			fmt.Fprint(w, wrap("  ordering    ", "              ", m.Ordering))
		}
		fmt.Fprintln(w, "  hops")
		for _, h := range m.Hops {
			fmt.Fprintf(w, "    %-21s -> %-21s %s\n", h.From, h.To, h.Level)
			fmt.Fprint(w, wrap("      ", "      ", h.Why))
			if h.Requires != "" {
				fmt.Fprint(w, wrap("      requires: ", "        ", h.Requires))
			}
		}
		fmt.Fprintln(w, "  idempotency must defend")
		for _, d := range m.Defend {
			fmt.Fprint(w, wrap("    - ", "      ", d))
		}
	}
}

// wrap fills text to 78 columns, the first line after first and the
// others after indent.
func wrap(first, indent, text string) string {
	var b strings.Builder
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len(line)+1+len(word) > 78 {
			b.WriteString(line + "\n")
			line, empty = indent, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(line + "\n")
	return b.String()
}
