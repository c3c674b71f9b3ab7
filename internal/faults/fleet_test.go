package faults_test

// The fleet scenario (issue 18, part 1): worker hosts as Linux network namespaces that the test
// builds itself, one PostgreSQL they all reach over a bridge, and a silent cut of one host's
// link (packets dropped, no RST) for longer than the lease.

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tenureq/tenure/generics"
	"github.com/tenureq/tenure/jobs"
)

// fleetNet is a bridge in the root namespace with one network namespace per worker host, each
// attached by a veth pair whose root-side end is a bridge port. PostgreSQL listens on the
// bridge's address.
type fleetNet struct {
	bridge string // bridge device in the root namespace
	gw     string // the bridge's address: PostgreSQL listens here
	subnet string // e.g. 10.231.7.0/24
	hosts  []fleetHost
}

type fleetHost struct {
	ns     string // network namespace
	rootIf string // the veth end in the root namespace (a bridge port): set down to cut the host
	addr   string // the host's address inside its namespace
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// fleetSkipReason says why this machine cannot run the fleet scenario ("" when it can).
func fleetSkipReason() string {
	if runtime.GOOS != "linux" {
		return "network namespaces need Linux"
	}
	if os.Geteuid() != 0 {
		return "creating network namespaces needs root (run the test as root, or in a container with CAP_NET_ADMIN and CAP_SYS_ADMIN)"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return "no `ip` command (iproute2) on $PATH"
	}
	probe := fmt.Sprintf("tenure-fleet-probe-%d", os.Getpid())
	if err := ipCmd("netns", "add", probe); err != nil {
		return "the kernel refused a network namespace: " + err.Error()
	}
	_ = ipCmd("netns", "del", probe)
	return ""
}

// sweepFleetLeftovers removes namespaces and bridges of fleet runs whose process is gone (a
// killed test run cannot clean up after itself).
func sweepFleetLeftovers(t *testing.T) {
	alive := func(pid string) bool { _, err := os.Stat("/proc/" + pid); return err == nil }
	if out, err := exec.Command("ip", "netns", "list").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) == 0 || !strings.HasPrefix(f[0], "tenure-fleet-") {
				continue
			}
			parts := strings.Split(f[0], "-") // tenure-fleet-<pid>-<i> or tenure-fleet-probe-<pid>
			if len(parts) != 4 {
				continue
			}
			if parts[2] == "probe" {
				if !alive(parts[3]) {
					_ = ipCmd("netns", "del", f[0])
				}
			} else if !alive(parts[2]) {
				t.Logf("fleet: removing leftover namespace %s", f[0])
				_ = ipCmd("netns", "del", f[0])
			}
		}
	}
	if out, err := exec.Command("ip", "-o", "link", "show", "type", "bridge").Output(); err == nil {
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			name := strings.TrimSuffix(f[1], ":")
			if pid, ok := strings.CutPrefix(name, "tnfb"); ok && !alive(pid) {
				t.Logf("fleet: removing leftover bridge %s", name)
				_ = ipCmd("link", "del", name)
			}
		}
	}
}

// newFleetNet builds the bridge and n host namespaces; t's cleanup removes them.
func newFleetNet(t *testing.T, n int) *fleetNet {
	t.Helper()
	sweepFleetLeftovers(t)
	pid := os.Getpid()
	// A /24 of 10.231.0.0/16 no other interface of this machine has an address in (another
	// run's bridge, say).
	third := -1
	for k := 0; k < 250; k++ {
		c := (pid + k) % 250
		out, err := exec.Command("ip", "-o", "-4", "addr", "show", "to", fmt.Sprintf("10.231.%d.0/24", c)).Output()
		if err == nil && strings.TrimSpace(string(out)) == "" {
			third = c
			break
		}
	}
	require.GreaterOrEqual(t, third, 0, "no free /24 in 10.231.0.0/16")
	fn := &fleetNet{
		bridge: fmt.Sprintf("tnfb%d", pid),
		gw:     fmt.Sprintf("10.231.%d.1", third),
		subnet: fmt.Sprintf("10.231.%d.0/24", third),
	}
	t.Cleanup(func() {
		for _, h := range fn.hosts {
			_ = ipCmd("netns", "del", h.ns) // removes its veth end, and so the pair
		}
		_ = ipCmd("link", "del", fn.bridge)
	})
	must := func(args ...string) {
		t.Helper()
		require.NoError(t, ipCmd(args...))
	}
	// Fixed MAC addresses and permanent neighbour entries both ways: a cut host's kernel must
	// not learn of the cut either (no ARP failure, so no "no route to host"): its packets,
	// new connections' SYNs included, just go unanswered.
	const brMAC = "02:54:00:00:00:01"
	hostMAC := func(i int) string { return fmt.Sprintf("02:54:00:00:01:%02x", i) }
	must("link", "add", fn.bridge, "address", brMAC, "type", "bridge")
	must("addr", "add", fn.gw+"/24", "dev", fn.bridge)
	must("link", "set", fn.bridge, "up")
	for i := 0; i < n; i++ {
		h := fleetHost{
			ns:     fmt.Sprintf("tenure-fleet-%d-%d", pid, i),
			rootIf: fmt.Sprintf("tnf%dh%d", pid, i),
			addr:   fmt.Sprintf("10.231.%d.%d", third, 10+i),
		}
		nsIf := fmt.Sprintf("tnf%dn%d", pid, i)
		must("netns", "add", h.ns)
		fn.hosts = append(fn.hosts, h)
		must("link", "add", h.rootIf, "type", "veth", "peer", "name", nsIf, "address", hostMAC(i))
		must("link", "set", nsIf, "netns", h.ns)
		must("link", "set", h.rootIf, "master", fn.bridge)
		must("link", "set", h.rootIf, "up")
		must("-n", h.ns, "addr", "add", h.addr+"/24", "dev", nsIf)
		must("-n", h.ns, "link", "set", nsIf, "up")
		must("-n", h.ns, "link", "set", "lo", "up")
		must("-n", h.ns, "neigh", "replace", fn.gw, "lladdr", brMAC, "dev", nsIf, "nud", "permanent")
		must("neigh", "replace", h.addr, "lladdr", hostMAC(i), "dev", fn.bridge, "nud", "permanent")
	}
	return fn
}

// cut takes host i off the network silently: its bridge port goes down, so the host's veth
// loses carrier and every packet either way is dropped (no RST, no ICMP; its routes stay, its
// sockets stay open and retransmit). heal brings the port back up.
func (fn *fleetNet) cut(i int) error  { return ipCmd("link", "set", fn.hosts[i].rootIf, "down") }
func (fn *fleetNet) heal(i int) error { return ipCmd("link", "set", fn.hosts[i].rootIf, "up") }

// TestFleetSilentCut (scenario 14): three worker hosts, each a network namespace with its own
// address on a private bridge, each running a worker process (the test binary, started with
// `ip netns exec`), share one PostgreSQL listening on the bridge. A producer enqueues 60
// jobs/s (lease 2 s, handlers 0–200 ms). After 4 s one host's link is cut silently (its bridge
// port down: packets dropped, nothing reset) for 5 s, 2.5 leases; then healed; the producer
// runs 6 s more and the jobs drain. Asserted: every job ends succeeded, and exactly one finish
// landed per job across the fleet (the cut host's late writes must not land: fencing); the
// jobs the cut host owned were reclaimed by the others' sweeps (Reclaimed > 0) and run there;
// the cut host's late finishes reached the database after the heal and were rejected as
// stale (> 0, from its Stats and OnOutcome); the cut host claimed and finished work again after
// the heal; no (job, generation) had two tokens; nothing stuck.
func TestFleetSilentCut(t *testing.T) {
	skipShort(t)
	if why := fleetSkipReason(); why != "" {
		t.Skip("fleet scenario skipped: " + why)
	}
	t0 := time.Now()
	const (
		hosts  = 3
		victim = 0
		lease  = 2 * time.Second
		preCut = 4 * time.Second
		// 2.5 leases. A finish written into the cut at x is retransmitted at x + 0.2, 0.6, 1.4,
		// 3.0, 6.2 s (Linux's minimum RTO doubling); with the heal at 5 s its next
		// retransmission comes at most 3.2 s later, inside the finish deadline (10 s), for
		// every x: so the cut host's late finishes reach the database instead of being
		// abandoned, whatever the phase.
		outage  = 5 * time.Second
		postCut = 6 * time.Second
		perTick = 6 // jobs per 100 ms: 60/s
	)
	fn := newFleetNet(t, hosts)

	srv := privateCluster(t, "listen_addresses=127.0.0.1,"+fn.gw)
	hba := filepath.Join(srv.DataDir(), "pg_hba.conf")
	f, err := os.OpenFile(hba, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = fmt.Fprintf(f, "host all all %s trust\n", fn.subnet)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	dbURL := migratedDB(t, srv, "fleet")
	pool := openPool(t, dbURL, 8, "fleet-test")
	ctx := context.Background()
	_, err = pool.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)

	// The hosts' URL: the bridge address (from the root namespace the source address is the
	// bridge's own, in the subnet, so the new pg_hba line admits it once the reload landed).
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	// No connect_timeout: a connection the engine opens during the cut is bounded by the
	// statement's own deadline (finish 10 s), so its SYN retransmitted after the heal still
	// gets through and the late finish reaches the database.
	u.Host = fn.gw + ":" + u.Port()
	hostURL := u.String()
	waitFor(t, 10*time.Second, "PostgreSQL on the bridge address", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, hostURL)
		if err != nil {
			return false
		}
		_ = conn.Close(cctx)
		return true
	})

	kids := make([]*childProc, hosts)
	for i := range kids {
		kids[i] = startChild(t, childOpts{DB: hostURL, Handler: "record", Concurrency: 4, SleepMS: 200,
			ID: "host-" + strconv.Itoa(i), NetNS: fn.hosts[i].ns, StatsEvery: time.Second})
	}
	for _, k := range kids {
		k.waitLine(t, 30*time.Second, "ready", time.Time{}, nil)
	}
	setup := time.Since(t0)

	// The producer: perTick jobs every 100 ms until told to stop.
	c := newClient(t, pool)
	var (
		idMu    sync.Mutex
		ids     []int64
		prodErr error
	)
	stopProd := make(chan struct{})
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		n := 0
		for {
			select {
			case <-stopProd:
				return
			case <-tk.C:
			}
			ps := make([]jobs.InsertManyParams, perTick)
			for i := range ps {
				n++
				ps[i] = jobs.InsertManyParams{Args: faultArgs{N: n}, Opts: &jobs.InsertOpts{Lease: lease}}
			}
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			got, err := c.InsertMany(ictx, ps)
			cancel()
			idMu.Lock()
			if err != nil && prodErr == nil {
				prodErr = err
			}
			for _, r := range got {
				ids = append(ids, r.Job.ID)
			}
			idMu.Unlock()
		}
	}()
	tStart := time.Now()

	time.Sleep(preCut)
	victimName := kids[victim].name
	// Cut while the victim runs several jobs (their finishes are the late writes), or at least one.
	if !tryFor(10*time.Second, func() bool { return ownedRunning(pool, victimName) >= 3 }) {
		waitFor(t, 10*time.Second, "the victim host to own running jobs", func() bool { return ownedRunning(pool, victimName) > 0 })
	}
	require.NoError(t, fn.cut(victim))
	tCut := time.Now()
	var ownedAtCut []int64
	rows, err := pool.Query(ctx, "SELECT id FROM tenure.jobs WHERE state = 'running' AND locked_by = $1", victimName)
	require.NoError(t, err)
	ownedAtCut, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	t.Logf("cut %s (bridge port %s down) owning %d running jobs", victimName, fn.hosts[victim].rootIf, len(ownedAtCut))

	// Each job the victim owned is reclaimed by a sweep and finished by another host.
	var takeBack time.Duration
	takenBack := tryFor(outage, func() bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND NOT (state = 'running' AND locked_by IS NOT DISTINCT FROM $2)",
			ownedAtCut, victimName).Scan(&n); err != nil {
			return false
		}
		return n == len(ownedAtCut)
	})
	if takenBack {
		takeBack = time.Since(tCut)
	}
	time.Sleep(time.Until(tCut.Add(outage)))
	require.NoError(t, fn.heal(victim))
	tHeal := time.Now()
	t.Logf("healed %s after %v", victimName, tHeal.Sub(tCut).Round(time.Millisecond))

	rejoin := kids[victim].waitLine(t, 20*time.Second, "claimed", tHeal, nil)
	time.Sleep(time.Until(tHeal.Add(postCut)))
	close(stopProd)
	<-prodDone
	idMu.Lock()
	require.NoError(t, prodErr, "producer")
	all := append([]int64(nil), ids...)
	idMu.Unlock()

	waitFor(t, 30*time.Second, "every job to succeed", func() bool {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND state <> 'succeeded'", all).Scan(&n); err != nil {
			return false
		}
		return n == 0
	})
	tDrained := time.Now()
	// The victim's writes held in TCP retransmission may land (and be rejected) after the drain:
	// wait until every attempt it started has an outcome.
	pending := func() int {
		out := map[attemptKey]bool{}
		for _, l := range kids[victim].all("outcome") {
			id, _ := strconv.ParseInt(l.Fields[1], 10, 64)
			g, _ := strconv.ParseInt(l.Fields[2], 10, 64)
			out[attemptKey{id, g}] = true
		}
		n := 0
		for _, l := range kids[victim].all("claimed") {
			id, _ := strconv.ParseInt(l.Fields[1], 10, 64)
			g, _ := strconv.ParseInt(l.Fields[2], 10, 64)
			if !out[attemptKey{id, g}] {
				n++
			}
		}
		return n
	}
	if !tryFor(20*time.Second, func() bool { return pending() == 0 }) {
		t.Logf("the victim still has %d attempts without an outcome", pending())
	}
	for _, k := range kids {
		k.signal(syscall.SIGTERM)
	}
	final := make([][]string, hosts)
	for i, k := range kids {
		final[i] = k.waitLine(t, 20*time.Second, "final-stats", time.Time{}, nil).Fields
	}

	// Per host: landed finishes per phase, stale and abandoned outcomes, and its counters.
	landed := map[int64]int{}
	landedBy := map[int64]string{}
	type hostFig struct {
		claimed, landed, stale, abandoned int
		phase                             [3]int // landed before the cut, during it, after the heal
	}
	figs := make([]hostFig, hosts)
	for i, k := range kids {
		figs[i].claimed = k.count("claimed")
		for _, l := range k.all("outcome") {
			id, _ := strconv.ParseInt(l.Fields[1], 10, 64)
			switch {
			case kv(l.Fields, "stale") == "true":
				figs[i].stale++
				t.Logf("%s at cut%+v: %s", k.name, l.At.Sub(tCut).Round(time.Millisecond), strings.Join(l.Fields, " "))
			case kv(l.Fields, "err") != "":
				figs[i].abandoned++
				t.Logf("%s at cut%+v: %s", k.name, l.At.Sub(tCut).Round(time.Millisecond), strings.Join(l.Fields, " "))
			case l.Fields[3] == "succeeded":
				figs[i].landed++
				landed[id]++
				landedBy[id] = k.name
				switch {
				case l.At.Before(tCut):
					figs[i].phase[0]++
				case l.At.Before(tHeal):
					figs[i].phase[1]++
				default:
					figs[i].phase[2]++
				}
			}
		}
	}
	rate := func(n int, d time.Duration) string { return strconv.FormatFloat(float64(n)/d.Seconds(), 'f', 1, 64) }
	var reclaimedByOthers int64
	for i, k := range kids {
		fr := final[i]
		if i != victim {
			reclaimedByOthers += kvInt(fr, "reclaimed")
		}
		t.Logf("HOST %s ns=%s addr=%s claimed=%d landed=%d jobs/s before-cut=%s during-cut=%s after-heal=%s stale_rejected=%d (stats %d) abandoned=%d leases_lost=%d reclaimed=%d finish_retries=%d claim_errors=%d listener_reconnects=%d",
			k.name, fn.hosts[i].ns, fn.hosts[i].addr, figs[i].claimed, figs[i].landed,
			rate(figs[i].phase[0], tCut.Sub(tStart)), rate(figs[i].phase[1], tHeal.Sub(tCut)), rate(figs[i].phase[2], tDrained.Sub(tHeal)),
			figs[i].stale, kvInt(fr, "stale"), figs[i].abandoned, kvInt(fr, "leases_lost"), kvInt(fr, "reclaimed"),
			kvInt(fr, "finish_retries"), kvInt(fr, "claim_errors"), kvInt(fr, "listener_reconnects"))
	}

	// Exactly one landed finish per job across the fleet.
	var twice, never []string
	for _, id := range all {
		switch landed[id] {
		case 1:
		case 0:
			never = append(never, strconv.FormatInt(id, 10))
		default:
			twice = append(twice, fmt.Sprintf("%d(x%d)", id, landed[id]))
		}
	}
	sort.Strings(twice)
	takenByOthers := 0
	for _, id := range ownedAtCut {
		if landedBy[id] != "" && landedBy[id] != victimName {
			takenByOthers++
		}
	}
	var reattempted int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM tenure.jobs WHERE id = ANY($1) AND attempts > 1", all).Scan(&reattempted))
	_, conflicts := generationConflicts(kids...)

	tl := audit(t, pool, all, generics.JobStateSucceeded, time.Second)
	result(t, "fleet-silent-cut", tl, "rejoin "+ms(rejoin.At.Sub(tHeal))+" after the heal",
		fmt.Sprintf("hosts=%d owned_at_cut=%d taken_back=%s finished_elsewhere=%d reattempted=%d reclaimed_by_others=%d victim_stale=%d victim_abandoned=%d landed_twice=%d never_landed=%d setup=%s total=%s",
			hosts, len(ownedAtCut), map[bool]string{true: ms(takeBack), false: "no"}[takenBack], takenByOthers, reattempted,
			reclaimedByOthers, figs[victim].stale, figs[victim].abandoned, len(twice), len(never),
			ms(setup), ms(time.Since(t0))))

	require.Empty(t, twice, "jobs whose finish landed more than once")
	require.Empty(t, never, "succeeded jobs without a landed finish reported by any host")
	require.Empty(t, conflicts, "(job, generation) pairs with two tokens")
	require.NotEmpty(t, ownedAtCut)
	require.True(t, takenBack, "the cut host's jobs were not taken back within the outage")
	// (Not all of them: a finish of the cut host already executing when the snapshot was taken
	// may still commit; the exactly-once check above covers every job either way.)
	require.Positive(t, takenByOthers, "no job the cut host owned was finished by another host")
	require.Positive(t, reclaimedByOthers, "the other hosts' sweeps reclaimed nothing: was the host cut?")
	require.Positive(t, figs[victim].stale, "no late finish of the cut host reached the database and was rejected: was the cut silent?")
	require.Equal(t, int64(figs[victim].stale), kvInt(final[victim], "stale"), "stale outcomes vs Stats.StaleRejected")
	require.Positive(t, figs[victim].phase[2], "the cut host finished no work after the heal")
	for i := range kids {
		if i != victim {
			require.Positive(t, figs[i].phase[1], "host %d finished nothing during the cut", i)
		}
	}
}
