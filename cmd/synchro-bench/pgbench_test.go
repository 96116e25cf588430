package main

import "testing"

const pgbenchOutput = `transaction type: /tmp/insert_t_plain.sql
scaling factor: 1
query mode: prepared
number of clients: 8
number of threads: 2
maximum number of tries: 1
duration: 10 s
number of transactions actually processed: 74012
number of failed transactions: 0 (0.000%)
latency average = 1.080 ms
initial connection time = 12.345 ms
tps = 7401.234567 (without initial connection time)
`

func TestParsePgbench(t *testing.T) {
	r, txns, err := parsePgbench(pgbenchOutput)
	if err != nil {
		t.Fatal(err)
	}
	if r.tps != 7401.234567 || r.latencyMs != 1.080 || txns != 74012 {
		t.Fatalf("got tps %v latency %v txns %d", r.tps, r.latencyMs, txns)
	}
	if _, _, err := parsePgbench("pgbench: error: client 3 aborted in command 1 (SQL) of script 0\n"); err == nil {
		t.Fatal("aborted client accepted")
	}
	failed := `number of failed transactions: 3 (0.1%)
tps = 10.0 (without initial connection time)
`
	if _, _, err := parsePgbench(failed); err == nil {
		t.Fatal("failed transactions accepted")
	}
	if _, _, err := parsePgbench("nothing"); err == nil {
		t.Fatal("missing tps accepted")
	}
}
