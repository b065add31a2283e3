package neighbour

import "strconv"

// GridPoint is one setting of vm.dirty_* (names without "vm.") to run the neighbours under.
type GridPoint struct {
	Name   string
	Kernel map[string]string
}

// Grid is the grid over vm.dirty_*: below and above the kernel's default ratios, tuned's
// postgresql profile (64MB/512MB), and the two write-back timers. The quick suite (full false)
// measures the first point only.
func Grid(full bool) []GridPoint {
	const MB = 1 << 20
	bytes := func(name string, bg, limit int64) GridPoint {
		return GridPoint{Name: name, Kernel: map[string]string{
			"dirty_background_bytes": strconv.FormatInt(bg, 10), "dirty_bytes": strconv.FormatInt(limit, 10)}}
	}
	knob := func(name string, kv ...string) GridPoint {
		p := GridPoint{Name: name, Kernel: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Kernel[kv[i]] = kv[i+1]
		}
		return p
	}
	grid := []GridPoint{bytes("dirty 64MB/256MB", 64*MB, 256*MB)}
	if !full {
		return grid
	}
	return append(grid,
		bytes("dirty 16MB/64MB", 16*MB, 64*MB),
		bytes("dirty 64MB/512MB (tuned)", 64*MB, 512*MB),
		bytes("dirty 256MB/1GB", 256*MB, 1024*MB),
		// Above the default ratios (10/20). 5/10 sits between 256MB/1GB and the default on
		// this machine and is left out: every configuration costs a minute and a half a run.
		knob("ratio 20/40", "dirty_background_ratio", "20", "dirty_ratio", "40"),
		knob("expire 5 s", "dirty_expire_centisecs", "500"),
		knob("writeback every 1 s", "dirty_writeback_centisecs", "100"),
	)
}
