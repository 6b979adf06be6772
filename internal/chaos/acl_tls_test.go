package chaos

// lockguard through a least-privilege Redis ACL user, and through Redis over TLS. No build
// tag: these run with make test.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockguard/lockguard/dlock"
	"github.com/lockguard/lockguard/internal/redistest"
)

// lockguardACL is the ACL rule of a user that may do everything dlock, ginlock and
// asynqlock's locks need and nothing else: the commands of the Lua scripts (ACLs apply to
// redis.call too), GET for completion records, pub/sub for hand-offs (sharded on a
// Cluster), PING for pub/sub health checks, WAIT for dlock.WithReplicaAck, INFO for
// dlock's Check; keys and channels under the default prefix. docs/reliability.md quotes it.
const lockguardACL = "on ~lockguard:* resetchannels &lockguard:* -@all " +
	"+evalsha +eval +get +ping +wait +info " +
	"+subscribe +unsubscribe +ssubscribe +sunsubscribe +publish +spublish " +
	"+exists +hdel +hget +hincrby +hmget +hset +hsetnx +pexpire +pttl +set +time " +
	"+zadd +zpopmin +zrange +zrem +zscore"

// docs/reliability.md quotes lockguardACL, the rule this package tests, word for word.
func TestACLQuotedInDocs(t *testing.T) {
	doc, err := os.ReadFile("../../docs/reliability.md")
	if err != nil {
		t.Fatal(err)
	}
	want := "user lockguard on >CHANGE-ME " + strings.TrimPrefix(lockguardACL, "on ")
	if !strings.Contains(string(doc), want+"\n") {
		t.Fatalf("docs/reliability.md does not quote the tested rule:\n%s", want)
	}
}

// Every command dlock's scripts call must be in lockguardACL: a script that gains a command
// otherwise fails only for users with an ACL.
func TestACLCoversScripts(t *testing.T) {
	files, err := filepath.Glob("../../dlock/scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("dlock scripts: %v", err)
	}
	allowed := strings.Fields(lockguardACL)
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`redis\.call\('([A-Za-z]+)'`).FindAllSubmatch(src, -1) {
			if cmd := "+" + strings.ToLower(string(m[1])); !slices.Contains(allowed, cmd) {
				t.Errorf("%s calls %s, which lockguardACL (and docs/reliability.md) lacks", filepath.Base(f), m[1])
			}
		}
	}
}

// exerciseLocks runs dlock's main paths on c and fails t on any error: free acquire, busy
// TryAcquire, a queued waiter served by hand-off, renewal past the lease, re-entry, a
// completion record seen by SkipCompleted, release. It returns the hand-off latency. rdb
// (on the same server, a user that may read the line) sees the waiter into the line.
func exerciseLocks(t *testing.T, c *dlock.Client, rdb redis.Cmdable, lease time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "acct:" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lk, err := c.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := c.TryAcquire(ctx, key); !errors.Is(err, dlock.ErrNotObtained) {
		t.Fatalf("TryAcquire of a held lock: %v, want ErrNotObtained", err)
	}
	again, err := c.Acquire(dlock.WithLock(ctx, lk), key) // re-entry
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if err := again.Release(ctx); err != nil {
		t.Fatalf("release of the re-entry: %v", err)
	}
	got := make(chan time.Time, 1)
	waitErr := make(chan error, 1)
	go func() {
		w, err := c.Acquire(ctx, key)
		if err != nil {
			waitErr <- err
			return
		}
		got <- time.Now()
		waitErr <- w.Complete(ctx, []byte("done"), time.Minute)
	}()
	time.Sleep(2 * lease) // the holder is renewed past its lease while the waiter queues
	if err := lk.Err(); err != nil {
		t.Fatalf("lock lost while held past its lease: %v", err)
	}
	// The release hands the lock over only to a waiter in line: wait for it to be there.
	for {
		n, err := rdb.ZCard(ctx, "lockguard:{"+key+"}:q").Result()
		if err != nil {
			t.Fatalf("the line: %v", err)
		}
		if n > 0 {
			break
		}
		select {
		case err := <-waitErr:
			t.Fatalf("waiter: %v", err)
		case <-ctx.Done():
			t.Fatal("the waiter never joined the line")
		case <-time.After(10 * time.Millisecond):
		}
	}
	released := time.Now()
	if err := lk.Release(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	var handOff time.Duration
	select {
	case at := <-got:
		handOff = at.Sub(released)
	case err := <-waitErr:
		t.Fatalf("waiter: %v", err)
	case <-ctx.Done():
		t.Fatal("the waiter was never served")
	}
	if err := <-waitErr; err != nil {
		t.Fatalf("complete: %v", err)
	}
	var done *dlock.CompletedError
	if _, err := c.Acquire(ctx, key, dlock.SkipCompleted()); !errors.As(err, &done) || string(done.Record) != "done" {
		t.Fatalf("SkipCompleted after Complete: %v", err)
	}
	return handOff
}

// A Redis user limited to lockguardACL runs dlock and ginlock (replay included) with no
// command refused, and is refused everything outside its list.
func TestRedisACLUser(t *testing.T) {
	args := []string{
		// The default user answers only INFO, which the harness's readiness probe sends.
		"--user", "default", "on", "nopass", "resetchannels", "-@all", "+info",
		"--user", "admin", "on", ">admin-secret", "~*", "&*", "+@all",
		"--user", "lockguard", ">lockguard-secret"}
	srv := redistest.Start(t, redistest.WithArgs(append(args, strings.Fields(lockguardACL)...)...))
	admin := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "admin", "admin-secret" })
	lg := srv.Client(t, func(o *redis.Options) { o.Username, o.Password = "lockguard", "lockguard-secret" })
	ctx := context.Background()
	if err := admin.ACLLogReset(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	locks := dlock.New(lg, dlock.WithLease(600*time.Millisecond), dlock.WithRetryInterval(50*time.Millisecond))
	defer locks.Close()
	if err := locks.Check(ctx); err != nil {
		t.Fatalf("Check through the ACL user: %v", err)
	}
	handOff := exerciseLocks(t, locks, admin, 600*time.Millisecond)

	// ginlock: a payment, its replay, a busy duplicate, all through the limited user.
	a := newSecApp(t, lg)
	body := `{"order_id":"o1"}`
	hdr := map[string]string{"X-User": "alice", "Idempotency-Key": "acl-1"}
	first := a.serve(secRequest("POST", "/pay", strings.NewReader(body), hdr))
	replay := a.serve(secRequest("POST", "/pay", strings.NewReader(body), hdr))
	if first.Code != http.StatusCreated || replay.Code != http.StatusCreated || replay.Body.String() != first.Body.String() {
		t.Fatalf("ginlock through the ACL user: %d %s then %d %s", first.Code, first.Body, replay.Code, replay.Body)
	}

	// Nothing the library sent was refused.
	entries, err := admin.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Username == "lockguard" {
			t.Errorf("ACL refused the library: %s %s on %s", e.Reason, e.Object, e.Context)
		}
	}

	// Everything outside the list is refused.
	refused := 0
	for name, cmd := range map[string]func() error{
		"FLUSHALL":               func() error { return lg.FlushAll(ctx).Err() },
		"KEYS":                   func() error { return lg.Keys(ctx, "*").Err() },
		"CONFIG GET":             func() error { return lg.ConfigGet(ctx, "*").Err() },
		"SET outside the prefix": func() error { return lg.Set(ctx, "other:key", "x", 0).Err() },
		"GET outside the prefix": func() error { return lg.Get(ctx, "other:key").Err() },
		"EVAL touching other keys": func() error {
			return lg.Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{"other:key"}).Err()
		},
		"EVAL calling FLUSHALL": func() error { return lg.Eval(ctx, "return redis.call('FLUSHALL')", []string{"lockguard:x"}).Err() },
		"PUBLISH other channel": func() error { return lg.Publish(ctx, "other", "x").Err() },
		"CLIENT LIST":           func() error { return lg.ClientList(ctx).Err() },
		"SCRIPT FLUSH":          func() error { return lg.ScriptFlush(ctx).Err() },
	} {
		// Refused directly (NOPERM), or inside a script (Redis 7.0 words that differently).
		if err := cmd(); err == nil || !strings.Contains(err.Error(), "NOPERM") && !strings.Contains(err.Error(), "can't run this command") {
			t.Errorf("%s as the lockguard user: %v, want a refusal", name, err)
		} else {
			refused++
		}
	}
	if err := srv.Client(t).Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("PING as the default user: %v, want NOPERM", err)
	}
	t.Logf("RESULT | ACL user limited to %d commands, ~lockguard:* &lockguard:* | dlock_paths_ok=7 ginlock_replay_ok=1 library_refusals=0 outside_commands_refused=%d/10 hand_off=%v",
		strings.Count(lockguardACL, "+"), refused, handOff.Round(time.Microsecond))
}

// testPKI writes a throwaway CA and a server certificate for 127.0.0.1 (ECDSA P-256) into
// dir and returns the CA pool and the three file paths.
func testPKI(t *testing.T, dir string) (pool *x509.CertPool, caFile, certFile, keyFile string) {
	t.Helper()
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	now := time.Now()
	caKey := newKey()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockguard test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey := newKey()
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(ca)
	return pool, write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server.key", "PRIVATE KEY", keyDER)
}

// startTLSOnly starts a redis-server through redistest with the TLS files loaded, then
// moves it to TLS only: CONFIG SET tls-port on a free port, then port 0. (redistest's
// readiness probe speaks plain TCP, so the server cannot start TLS-only through it.)
// It returns the TLS address.
func startTLSOnly(t *testing.T, caFile, certFile, keyFile string) string {
	t.Helper()
	srv := redistest.Start(t, redistest.WithArgs("--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", caFile, "--tls-auth-clients", "no"))
	plain := redis.NewClient(srv.Options())
	defer plain.Close()
	ctx := context.Background()
	var addr string
	for attempt := 0; addr == ""; attempt++ {
		port := strings.TrimPrefix(freeAddr(t), "127.0.0.1:")
		err := plain.ConfigSet(ctx, "tls-port", port).Err()
		switch {
		case err == nil:
			addr = "127.0.0.1:" + port
		case attempt == 5:
			t.Fatalf("CONFIG SET tls-port: %v", err)
		}
	}
	if err := plain.ConfigSet(ctx, "port", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", srv.Addr(), time.Second); err == nil {
		_ = c.Close()
		t.Fatal("the plain port still accepts connections")
	}
	return addr
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// With dlock.WithReplicaAck the client also sends WAIT after each grant: the documented user
// may send it, and a lock taken through that user waits for the replica.
func TestRedisACLUserWithReplicaAck(t *testing.T) {
	args := []string{"--user", "default", "on", "nopass", "~*", "&*", "+@all", "--user", "lockguard", ">lockguard-secret"}
	master := redistest.Start(t, redistest.WithArgs(append(args, strings.Fields(lockguardACL)...)...))
	replica := redistest.Start(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rr := replica.Client(t)
	for !strings.Contains(rr.Info(ctx, "replication").Val(), "master_link_status:up") {
		select {
		case <-ctx.Done():
			t.Fatal("the replica never synced")
		case <-time.After(50 * time.Millisecond):
		}
	}
	lg := master.Client(t, func(o *redis.Options) { o.Username, o.Password = "lockguard", "lockguard-secret" })
	locks := dlock.New(lg, dlock.WithReplicaAck(1, 5*time.Second))
	defer locks.Close()
	key := "acl-replica-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	lk, err := locks.Acquire(ctx, key)
	if err != nil {
		t.Fatalf("Acquire with WithReplicaAck as the lockguard user: %v", err)
	}
	if n, err := rr.Exists(ctx, "lockguard:{"+key+"}:lock").Result(); err != nil || n != 1 {
		t.Fatalf("the replica does not hold the lock after the acknowledged grant: %d, %v", n, err)
	}
	if err := lk.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Redis over TLS only: dlock acquires, waits, hands off, renews and releases through a
// go-redis client with TLSConfig; a client without TLS, or trusting another CA, gets nowhere.
func TestRedisTLS(t *testing.T) {
	pool, caFile, certFile, keyFile := testPKI(t, t.TempDir())
	addr := startTLSOnly(t, caFile, certFile, keyFile)
	ctx := context.Background()
	tlsOpts := func(cfg *tls.Config) *redis.Options {
		return &redis.Options{Addr: addr, TLSConfig: cfg, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, MaxRetries: -1}
	}

	rdb := redis.NewClient(tlsOpts(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}))
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS: %v", err)
	}
	locks := dlock.New(rdb, dlock.WithLease(600*time.Millisecond), dlock.WithRetryInterval(50*time.Millisecond))
	defer locks.Close()
	handOff := exerciseLocks(t, locks, rdb, 600*time.Millisecond)

	// The same port without TLS, or with a CA that did not sign the server's certificate.
	plainErr := func() error {
		c := redis.NewClient(tlsOpts(nil))
		defer c.Close()
		return c.Ping(ctx).Err()
	}()
	otherPool, _, _, _ := testPKI(t, t.TempDir())
	wrongCAErr := func() error {
		c := redis.NewClient(tlsOpts(&tls.Config{RootCAs: otherPool, ServerName: "127.0.0.1"}))
		defer c.Close()
		return c.Ping(ctx).Err()
	}()
	var unknownCA x509.UnknownAuthorityError
	if plainErr == nil || wrongCAErr == nil || !errors.As(wrongCAErr, &unknownCA) {
		t.Errorf("plain client: %v; client trusting another CA: %v (want x509.UnknownAuthorityError)", plainErr, wrongCAErr)
	}
	t.Logf("RESULT | Redis TLS only (ECDSA P-256 test CA, TLS 1.2+) | dlock_paths_ok=7 hand_off=%v plain_client_refused=%v wrong_ca_refused=%v",
		handOff.Round(time.Microsecond), plainErr != nil, wrongCAErr != nil)
}
