package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// checkRatios compares the same-run ratios of this run with the committed figures of
// the summary table that opens docs/benchmarks.md (| metric | baseline | ours | ratio
// | target | verdict | date |). A ratio below half of its committed figure fails:
// same-run ratios move by up to ±30 % with machine load, so only a real regression
// trips it. Absolute times are never compared.
func checkRatios(path string, measured map[string]float64, out io.Writer) error {
	committed, err := summaryRatios(path)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(measured))
	for n := range measured {
		names = append(names, n)
	}
	sort.Strings(names)
	var failed []string
	checked := 0
	for _, n := range names {
		want, ok := committed[n]
		if !ok {
			fmt.Fprintf(out, "check: %s = %.3f (no committed figure)\n", n, measured[n])
			continue
		}
		checked++
		verdict := "ok"
		if measured[n] < want/2 {
			verdict = "REGRESSION"
			failed = append(failed, n)
		}
		fmt.Fprintf(out, "check: %s = %.3f, committed %.3f, floor %.3f: %s\n", n, measured[n], want, want/2, verdict)
	}
	if checked == 0 {
		return fmt.Errorf("check: no measured ratio has a committed figure in %s", path)
	}
	if len(failed) > 0 {
		return fmt.Errorf("check: below half of the committed figure: %s", strings.Join(failed, ", "))
	}
	return nil
}

// summaryRatios reads the metric → ratio rows of the first table in path.
func summaryRatios(path string) (map[string]float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(f)
	inTable := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			continue
		}
		ratio, err := strconv.ParseFloat(strings.TrimSpace(cells[3]), 64)
		if err != nil {
			continue // the header, the rule line, or a row without a ratio
		}
		out[strings.TrimSpace(cells[0])] = ratio
	}
	return out, sc.Err()
}
