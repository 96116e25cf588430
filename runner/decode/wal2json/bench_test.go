package wal2json_test

import "testing"

// BenchmarkDecodeTxn decodes one captured one-row transaction (B, I, C) per
// iteration.
func BenchmarkDecodeTxn(b *testing.B) {
	p := capture(b)
	s := newSession(b)
	txn := [][]byte{p[5], []byte(`{"action":"I","xid":752,"timestamp":"2026-12-01 16:37:20.541483+00","lsn":"0/15A54E8","schema":"public","table":"docs","columns":[{"name":"id","typeoid":20,"value":1},{"name":"owner","typeoid":25,"value":"b"},{"name":"flag","typeoid":16,"value":true},{"name":"body","typeoid":114,"value":null},{"name":"meta","typeoid":3802,"value":null},{"name":"blob","typeoid":17,"value":null},{"name":"n","typeoid":23,"value":-7},{"name":"big","typeoid":25,"value":"x"},{"name":"at","typeoid":1184,"value":null}],"pk":[{"name":"id","typeoid":20}]}`), p[7]}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, q := range txn {
			if _, err := s.Decode(2, q); err != nil {
				b.Fatal(err)
			}
		}
	}
}
