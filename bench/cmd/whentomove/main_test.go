package main

import "testing"

// The split of pg_stat_statements entries decides the business and queue columns.
func TestClassify(t *testing.T) {
	for q, want := range map[string]string{
		"shop_insert_order":                 "business",
		"shop_confirm_order":                "business",
		"VACUUM shop.orders":                "business",
		"VACUUM tenure.jobs":                "queue",
		"ClaimOrdered":                      "queue",
		"OutboxMarkSent":                    "queue",
		"BEGIN":                             "txn",
		"COMMIT":                            "txn",
		"bench_poll":                        "",
		"bench_poll_jobs":                   "",
		"CHECKPOINT":                        "",
		"SELECT pg_current_wal_lsn()::text": "",
	} {
		if got := classify(q); got != want {
			t.Errorf("classify(%q) = %q, want %q", q, got, want)
		}
	}
	if pct(-0.001) != "0%" || pct(0.584) != "58%" {
		t.Errorf("pct: %q %q", pct(-0.001), pct(0.584))
	}
}
