// Package switchboard lets AI agents find each other and hand each other
// work — only with a human's approval, and with work that is never lost.
//
// Agents announce themselves with A2A Agent Cards in a bounded directory.
// Agent A asks agent B for a scope over B's queues with a friend request
// carrying an OIDC ID token of A's human; the request is a pending edge that
// grants nothing, and its approval lands as a todo in B's human's approvals
// queue with a legible who / why / scope summary. B's human approves —
// optionally narrowing the scope — and that approval mints a grant whose
// credential A's agent then uses to hand B work with CreateFor. Work never
// arrives any other way: switchboard accepts no A2A task.
//
// Transport is the host's. The library opens no socket; a host wraps these
// calls in its own HTTP or MCP layer, authenticates humans for the
// human-facing calls, and passes agents' credentials through. What every
// host needs is ready: DecodeJSON reads its JSON input one strict way,
// StatusOf maps any error to an HTTP status and a stable code, module
// github.com/switchboardhq/switchboard/mcptools serves the queue verbs as MCP
// tools with a bearer verifier, and examples/host is a whole HTTP host.
//
// # The flow
//
//  1. Discover: [Switchboard.Publish] a [Persona] with an A2A [agentcard.Card];
//     others [Switchboard.Lookup] or [Switchboard.Search] it. Only the
//     directories in Config.Directories are consulted (default the store's
//     own, [NewLocalDirectory]; [NewRemoteDirectory] adds allow-listed
//     origins), and only discoverable personas resolve. Cards can be signed
//     ([agentcard.Sign]) and verified ([agentcard.Verify], [agentcard.Trust]).
//  2. Request: [Switchboard.Request] with a [FriendRequest]. Its ID token must
//     come from an allow-listed [Issuer], name A's owner as subject, be fresh,
//     and carry [RequestNonce] of the request as its nonce. The nonce is a
//     protocol an agent in any language computes: base64url (unpadded)
//     SHA-256 of the RFC 8785 (JCS) form of {"v": 3, "from", "to", "why",
//     "pickup", "scope": [{"queue", "verbs"}, …]}, the scope in the
//     request's order; testdata/request-nonce.json holds vectors.
//  3. Approval lands as a todo: [Switchboard.Approvals] lists them; each
//     todo's [Approval] has the summary and a plain-text rendering.
//  4. Approval is the vend: [Switchboard.Approve] with a narrowed [Scope] (or
//     nil for the scope as requested) mints the [Grant]. The requesting agent
//     then calls [Switchboard.Collect] with the pickup secret whose verifier
//     ([NewPickup]) its request carried, and receives the [Credential], once.
//     [Switchboard.Deny] and [Switchboard.Withdraw] end a request instead.
//  5. Work flows as todos: [Switchboard.CreateFor]; the queue's owner drains
//     it with a credential from [Switchboard.Vend] through
//     [Switchboard.Claim], [Switchboard.Heartbeat], [Switchboard.Complete],
//     [Switchboard.Fail] and [Switchboard.Release] — or, the easy and fast
//     path, [Switchboard.Work], a runner on [Switchboard.ClaimN] and
//     [Switchboard.CompleteAndClaim] (one commit per delivered todo).
//     [Switchboard.Reap] (or [Switchboard.Run]) does the time-driven
//     housekeeping, including purging ended todos and old audit events
//     after their retention.
//
// # Rules on every edge
//
// Grants are per direction: A→B gives B nothing over A. Either side's human
// may [Switchboard.Revoke] a grant; the next call with its credential fails
// and todos from it that nobody has claimed yet are cancelled. Grants are
// non-transitive: a queue, todo, edge or persona outside what a caller may
// see is [ErrNotFound], worded exactly like one that does not exist — for
// every verb, including a todo id whose verb the grant does not hold.
//
// Non-transitive covers what a friend sees, not only which records. A
// friend grant holding the drain verbs (claim, complete, …) works every
// todo of its queue, whoever sent it, but a todo it receives — from
// [Switchboard.Claim], [Switchboard.ClaimN], [Switchboard.CompleteAndClaim],
// [Switchboard.Work], [Switchboard.Get], [Switchboard.List],
// [Switchboard.CreateFor], the MCP tools, its webhook's deliveries or
// [Switchboard.GrantTodos] for the friend's human — names no other party.
// A todo it did not create has a zero [Origin], no DedupKey, no
// tracestate (its traceparent stays) and no Approval; in every todo's
// History, an attempt by any other grant (another friend's, the owner's
// worker's) has no Agent and no Grant, only its number, times, outcome
// and reason. The work itself — kind, title, payload, priority, result,
// state — is whole. The queue owner's own grants ([Switchboard.Vend]) and
// the host's views ([Switchboard.Subscribe], [Switchboard.InspectTodo] and
// the other Inspect calls) see everything.
//
// Approve, Deny, Withdraw, Revoke and Vend are human acts: they take a
// [Human], and no credential can perform them. A host that signs its humans
// in with OIDC turns their ID token into that Human with
// [Switchboard.VerifyHuman].
//
// # Storage
//
// Every record lives in a [store.Store], an ordered transactional key-value
// interface; each operation is one transaction, so a failure leaves nothing
// half-written, and every state change commits an [Event] in the same
// transaction. Package store/bolt is the default backend (a bbolt file, with
// a write-ahead log beside it while open) and store/memory serves tests.
// Several Switchboard values may share one store; several processes share
// one through store/postgres (its own module), which also wakes blocked
// claims and subscriptions in every process when another commits
// (store.Watcher). Call [Switchboard.Close] when done with a Switchboard.
//
// # The audit log
//
// Events form a Merkle tree (RFC 6962/9162, golang.org/x/mod/sumdb/tlog),
// numbered without gaps. [Switchboard.Checkpoint] signs its size and root
// hash as a C2SP checkpoint with Config.LogKey ([NewLogKey]);
// [Switchboard.ProveEvent] and [Switchboard.ProveConsistency] make proofs
// that a third party checks with the public key alone ([OpenCheckpoint],
// [VerifyInclusion], [VerifyConsistency]); [Switchboard.VerifyAudit]
// rebuilds the tree from the stored events and names the first damaged
// position. On a store whose writers run concurrently (store.Appender:
// PostgreSQL) events commit pending and one sequencer at a time, on a
// lease any process can take over, adds them to the tree right after
// commit; elsewhere they are added in the committing transaction.
//
// The host cannot get a rewritten log signed: before any signature,
// Checkpoint checks that the stored tree still hashes to the last signed
// checkpoint — the stored one and the one Config.Checkpoints keeps
// outside the store ([CheckpointFile]) — and refuses with an [AuditError]
// otherwise ([Switchboard.CheckLog] checks the same at start). Witnesses
// (Config.Witnesses; package witness, C2SP tlog-witness) cosign each
// checkpoint only after a consistency proof from the last one they
// cosigned ([OpenWitnessedCheckpoint] requires k of n). Keys rotate with
// Config.PreviousLogKeys. See docs/audit-log.md.
//
// # Testing
//
// Package switchboardtest runs a real OIDC issuer inside a test process and
// mints request-bound ID tokens, so a user's tests go through the whole flow
// on store/memory with no stub.
//
// # Delivery
//
// Delivery is at-least-once: a worker whose lease expires before it
// completes may see its todo handed to another worker. Handlers should be
// idempotent — key side effects on the todo's ID.
//
// # Secrets
//
// Credentials are 256-bit random values shown once and stored as SHA-256
// hashes; ID tokens are verified, hashed for replay protection and dropped.
// Neither appears in an error, an event or a stored record.
package switchboard
