// Package storm drives a running shop with the load of `make demo` and measures what went
// wrong, from the shop's own answers and ledger rather than from assumptions:
//
//   - duplicate pays: Config.Pays concurrent pays of one order, as double-clicks and
//     retries with a few Idempotency-Keys (several requests share each key), then one more
//     pay per key after the burst, as a client whose answer was lost retries (a protected
//     shop replays the paying key's stored answer);
//   - balance storm: Config.Withdrawals concurrent withdrawals spread over Config.Accounts
//     accounts, mixed with refund requests (each sent Config.RefundCopies times) of orders
//     paid beforehand, which the shop's worker applies.
//
// Run returns a Report: answers by status, charges and refunds found in the ledger,
// expected balances (computed from the answers) against final ones, lost updates (ledger
// entries computed from a balance version another entry already used), whether every
// ledger adds up to its account's balance, and latency percentiles. Report.Anomalies lists
// every deviation from a correct shop; WriteTable prints runs side by side.
//
// The storm only sends requests to the base URL it is given (a shop on this machine), in
// a bounded number, and stops by itself.
package storm
