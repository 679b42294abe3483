package bench

import "slices"

// Alternate runs every mode once per round, rotating which one goes first,
// and returns each mode's metrics as medians over the rounds: on a shared
// machine, and with caches that favour whoever runs second, that is how two
// modes are compared in one run.
func Alternate(rounds int, modes []string, run func(mode string) (Result, error)) (map[string]map[string]float64, error) {
	all := map[string][]Result{}
	for round := range rounds {
		for i := range modes {
			mode := modes[(i+round)%len(modes)]
			r, err := run(mode)
			if err != nil {
				return nil, err
			}
			all[mode] = append(all[mode], r)
		}
	}
	out := map[string]map[string]float64{}
	for mode, rs := range all {
		out[mode] = medians(rs)
	}
	return out, nil
}

// medians takes each metric's median over rs (the upper one of an even
// count).
func medians(rs []Result) map[string]float64 {
	out := map[string]float64{}
	for name := range rs[0].Metrics {
		v := make([]float64, 0, len(rs))
		for _, r := range rs {
			v = append(v, r.Metrics[name])
		}
		slices.Sort(v)
		out[name] = v[len(v)/2]
	}
	return out
}
