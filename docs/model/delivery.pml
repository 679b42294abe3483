/*
 * The delivery protocol of mensageria, as a SPIN model.
 *
 * docs/model/README.md says how each step maps to a SQL statement or a Go
 * function, what is abstracted away and why, and how to run it. In short:
 * every SQL statement (and every Kafka request) is one atomic step, and the
 * relays of one app interleave freely between those steps, which is what a
 * paused, slow or partitioned process looks like from the outside.
 *
 * Bounds (override with -D...): N messages, R relays, LEASE ticks of lease,
 * DELAY ticks of retry backoff, MAXATT attempts, LIMIT rows per claim, and
 * the fault budgets below.
 *
 * Variants: -DKAFKA (the transactional Kafka route instead of a plain
 * Sender), -DUNORDERED (a route without per-key order), -DNOELECTION
 * (Election: none), -DATTEMPTS (count attempts in the safety run too),
 * -DCLAIM_IGNORES_LEASE (a claim that takes rows still leased: it reaches
 * no state the model does not reach without it), -DLIVE (the timing
 * assumption of the liveness run; see clock), -DAMO (an at-most-once route
 * to a receiver that is not idempotent: mark before send, rows in doubt,
 * the reconcile probe; docs/adr/0015).
 *
 * Deliberate bugs, each of which must make the check fail:
 * -DBUG_SETTLE_WITHOUT_LEASE_CHECK, -DBUG_SETTLE_WITHOUT_TOKEN_CHECK,
 * -DBUG_CLAIM_WITHOUT_FENCE, -DBUG_CLAIM_IGNORES_ORDER,
 * -DBUG_KAFKA_NO_RECONCILE, -DBUG_KAFKA_POSITIONS_OUTSIDE_TXN,
 * -DBUG_KAFKA_KNOWN_BEFORE_COMMIT, -DBUG_AMO_SEND_UNMARKED,
 * -DBUG_AMO_CLAIM_MARKED, -DBUG_AMO_SEND_AFTER_LEASE, and for the liveness
 * run -DBUG_DEAD_BLOCKS_KEY.
 */

#ifndef N
#define N 2
#endif
#ifndef R
#define R 2
#endif
#ifndef LEASE
#define LEASE 1
#endif
#ifndef DELAY
#define DELAY 1
#endif
#ifndef MAXATT
#define MAXATT 2
#endif
#ifndef LIMIT
#define LIMIT 2
#endif
/* Fault budgets, for the whole run. */
#ifndef CRASHES
#define CRASHES 1
#endif
#ifndef STOPS
#define STOPS 1
#endif
#ifndef SESSIONLOSS
#define SESSIONLOSS 1
#endif
#ifndef SETTLEFAILS
#define SETTLEFAILS 1
#endif
#ifndef KFAULTS
#define KFAULTS 1
#endif
/* Lease expiries of a batch whose relay is still running (-DLIVE only). */
#ifndef SLOW
#define SLOW 1
#endif

#if defined(LIVE) && !defined(ATTEMPTS)
#define ATTEMPTS
#endif

#define PENDING   0
#define DELIVERED 1
#define DEAD      2

/* What a relay will settle for one row of its batch (relay.classify). */
#define O_NONE    0
#define O_OK      1 /* settle_delivered.sql */
#define O_RETRY   2 /* settle_retry.sql */
#define O_DEAD    3 /* settle_dead.sql: Permanent, or the last attempt failed */
#define O_RELEASE 4 /* settle_release.sql: stopping, not tried */
#define O_DOUBT   5 /* settle_in_doubt.sql: the outcome is unknown (AMO) */

#define BIT(x)     (1 << (x))
#define HAS(m, x)  (((m) >> (x)) & 1)
/* Rows 0,1 share key 0, rows 2,3 key 1; the row id is the index. */
#define KEY(x)     ((x) / 2)

/* ---- the outbox (driver/postgres/migrations/001_outbox_inbox.sql) ---- */
byte st[N];     /* state */
#ifdef ATTEMPTS
byte att[N];    /* attempts, saturating at MAXATT+1 (alike from MAXATT on) */
#endif
byte tok[N];    /* lease_token: relay+1, 0 for NULL */
byte lease[N];  /* lease_until - now() in ticks; 0: NULL or passed */
byte due[N];    /* available_at - now() in ticks; 0: due */
#ifdef AMO
bool marked[N]; /* attempted_at IS NOT NULL (migration 007) */
byte applied[N]; /* ghost: effects of the row the receiver applied */
#endif

/* ---- the election: leader.epoch and the lease row's live holder ---- */
byte epoch;
byte lockHolder; /* relay+1 whose lease runs (leader.holder), 0 none */

#ifdef KAFKA
/* ---- Kafka: the coordinator and one transactional id (one lane) ---- */
/* Producer epochs are only ever compared for equality, so the model keeps
 * which process holds the current one, not the numbers. */
byte kcur;       /* relay+1 whose producer has the id's current epoch, 0 none */
bool txnOpen;    /* kcur's producer has a transaction open */
byte txnRows;    /* rows produced in it */
byte record;     /* the latest committed position record of the id */
byte kcommitted[N]; /* ghost: committed copies of the row in the topic */
#endif

/* ---- ghosts: what the world saw, for the properties ---- */
bool got[N];       /* the receiver (a read_committed consumer) has it */
byte claimedEpoch; /* epoch of the latest claim that returned rows */
#ifdef LIVE
byte inbatch[R];   /* rows of each running relay's batch */
#endif

/* ---- fault budgets ---- */
byte crashes = CRASHES;
byte stops = STOPS;
byte sessionloss = SESSIONLOSS;
byte settlefails = SETTLEFAILS;
#ifdef KAFKA
byte kfaults = KFAULTS;
#endif
#ifdef LIVE
byte slow = SLOW;
#endif

/* Scratch of the atomic steps: written before read within one step,
 * never kept across steps, so not part of the state. */
hidden byte i, j, want, elig;

#if N == 1
#define allDone (st[0] != PENDING)
#elif N == 2
#define allDone (st[0] != PENDING && st[1] != PENDING)
#elif N == 3
#define allDone (st[0] != PENDING && st[1] != PENDING && st[2] != PENDING)
#else
#define allDone (st[0] != PENDING && st[1] != PENDING && st[2] != PENDING && st[3] != PENDING)
#endif

#ifdef AMO
/* Every row's effect applied at most once (N is at most 4). */
#if N == 1
#define ONCE (applied[0] <= 1)
#elif N == 2
#define ONCE (applied[0] <= 1 && applied[1] <= 1)
#elif N == 3
#define ONCE (applied[0] <= 1 && applied[1] <= 1 && applied[2] <= 1)
#else
#define ONCE (applied[0] <= 1 && applied[1] <= 1 && applied[2] <= 1 && applied[3] <= 1)
#endif
/* The relay sends only inside its own lease: its delivery deadline is
 * lease - lease/10 from before the claim (relay.claim), and the request
 * reaches the receiver before the lease ends (the probe's Quiet covers a
 * request still on the way when the sender died). */
#ifdef BUG_AMO_SEND_AFTER_LEASE
#define SENDOK(x) true
#else
#define SENDOK(x) (tok[x] == me + 1 && lease[x] > 0)
#endif
#endif

/* The receiver (or a read_committed consumer) sees row x. Per-key order:
 * the first delivery of a row comes after every older row of its key was
 * delivered at least once or parked dead (ADR 0005). */
inline arrive(x) {
#ifdef AMO
	/* the receiver is not idempotent: every request applies its effect */
	applied[x]++;
	assert(ONCE); /* at-most-once: no effect applied twice */
#endif
	if
	:: !got[x] ->
#ifndef UNORDERED
		for (j : 0 .. N-1) {
			if
			:: j < x && KEY(j) == KEY(x) -> assert(got[j] || st[j] == DEAD)
			:: else
			fi
		}
#endif
		got[x] = true
	:: else
	fi
}

/* relay.classify of a failed attempt. The attempts only choose between a
 * retry and dead: the safety run lets any failure go either way, which
 * covers every count; the liveness run counts them, as retrying forever
 * is what it must rule out. */
#ifdef ATTEMPTS
#define FAILED(x) if :: att[x] >= MAXATT -> out[x] = O_DEAD :: else -> out[x] = O_RETRY fi
#define COUNT(x) if :: att[x] <= MAXATT -> att[x]++ :: else fi
#define UNCOUNT(x) if :: att[x] > 0 -> att[x]-- :: else fi
#else
#define FAILED(x) if :: out[x] = O_DEAD :: out[x] = O_RETRY fi
#define COUNT(x) skip
#define UNCOUNT(x) skip
#endif

/* One Send of a plain Sender, and what the relay was told. */
#ifdef AMO
/* On an at-most-once route (relay.classifyOnce): only a definite "not
 * sent" is retried; an answer that does not say is in doubt. */
inline send(x) {
	atomic {
		if
		:: SENDOK(x) -> arrive(x); out[x] = O_OK    /* 2xx */
		:: SENDOK(x) -> arrive(x); out[x] = O_DOUBT /* applied; the answer lost, or a timeout */
		:: true -> out[x] = O_DOUBT                 /* a timeout or a cut connection, not applied */
		:: true -> FAILED(x)                        /* definitely not sent: refused, DNS, a declared status */
		:: true -> out[x] = O_DEAD                  /* Permanent: the receiver refused it */
		fi;
		todo = todo & ~BIT(x)
	}
}
#else
inline send(x) {
	atomic {
		if
		:: true -> arrive(x); out[x] = O_OK    /* 2xx */
		:: true -> arrive(x); FAILED(x)        /* applied, the answer lost */
		:: true -> FAILED(x)                   /* a transient failure */
		:: out[x] = O_DEAD                     /* Permanent */
		fi;
		todo = todo & ~BIT(x)
	}
}
#endif

/* A retry or a release clears the mark: the relay knows the request never
 * reached the receiver (or the probe says it has no effect). */
#ifdef AMO
#define UNMARK(x) marked[x] = false
#else
#define UNMARK(x) skip
#endif

/* The guards of every settle statement: state = 'pending' AND
 * lease_token = $2 AND lease_until > now(). */
#ifdef BUG_SETTLE_WITHOUT_TOKEN_CHECK
#define TOKEN_OK(x) true
#else
#define TOKEN_OK(x) (tok[x] == me + 1)
#endif
#ifdef BUG_SETTLE_WITHOUT_LEASE_CHECK
#define LEASE_OK(x) true
#else
#define LEASE_OK(x) (lease[x] > 0)
#endif
/* claim.sql: the fence CTE, and lease_until IS NULL OR lease_until <= now() */
#if defined(NOELECTION) || defined(BUG_CLAIM_WITHOUT_FENCE)
#define FENCE_OK true
#else
#define FENCE_OK (epoch == myep)
#endif
#ifdef CLAIM_IGNORES_LEASE
#define FREE(x) true
#elif defined(AMO) && !defined(BUG_AMO_CLAIM_MARKED)
#define FREE(x) (lease[x] == 0 && !marked[x]) /* claim.sql: attempted_at IS NULL */
#else
#define FREE(x) (lease[x] == 0)
#endif
/* the rows of a claim may be sent once the mark step ran */
#ifdef AMO
#define MARKED mk
#else
#define MARKED true
#endif
/* ADR 0005: a pending row blocks the newer rows of its key; a dead one
 * does not */
#ifdef BUG_DEAD_BLOCKS_KEY
#define BLOCKS(x) (st[x] != DELIVERED)
#else
#define BLOCKS(x) (st[x] == PENDING)
#endif
#ifdef KAFKA
#define STAGE_IDLE (stage == 0)
#else
#define STAGE_IDLE true
#endif
/* The claim loop claims while the last Acquire said this process leads,
 * with Acquires in between at any time. The liveness run makes the loop
 * fair: Acquire and claim take turns (and the rearm after an election win
 * comes first), since weak fairness is per process, not per step. */
#ifdef NOELECTION
#define CLAIMNEXT true
#define ACQNEXT true
#define SETACQ(x) skip
#elif defined(LIVE)
#ifdef KAFKA
#define CLAIMNEXT (acq && !rearm)
#else
#define CLAIMNEXT acq
#endif
#define ACQNEXT (!acq)
#define SETACQ(x) acq = (x)
#else
#define CLAIMNEXT held
#define ACQNEXT true
#define SETACQ(x) skip
#endif
/* the sender's view of the election: OnElection never comes without one */
#ifdef NOELECTION
#define ELECTED false
#else
#define ELECTED held
#endif
#ifdef LIVE
#define SETBATCH(m) inbatch[me] = (m)
#else
#define SETBATCH(m) skip
#endif

/* InitProducerID: bumps the epoch, which fences every older producer of
 * the id and aborts its open transaction; then the record is read back
 * with read_committed (TransactionalSender.open). */
#define KOPEN kcur = me + 1; txnOpen = false; txnRows = 0; known = known | record

/* ---- the relay: one replica of the app ---- */
proctype relay(byte me) {
	byte batch, todo; /* the claimed batch; its rows not yet sent */
	byte out[N];
	bool held;        /* the last Acquire said this process leads */
	bool stopping;
	bool acq;         /* Acquire said so: claim next */
	bool mk;          /* the batch's mark step ran (AMO) */
	byte myep;        /* the epoch it believes in (relay.epoch) */
#ifdef KAFKA
	byte known, stage; /* the positions this process knows; SendBatch's step */
	bool opened, kfenced, rearm;
#endif

start: /* a new process: nothing of the previous one survives */
	atomic {
		held = false; stopping = false; SETACQ(false); myep = 0; batch = 0; todo = 0; mk = false;
		for (i : 0 .. N-1) { out[i] = O_NONE }
		SETBATCH(0);
#ifdef KAFKA
		known = 0; stage = 0;
		opened = false; kfenced = false; rearm = false;
#endif
#ifdef NOELECTION
		held = true
#endif
	}

	do
	:: atomic { batch == 0 && allDone -> break }

#ifndef NOELECTION
	/* step acquire: elector.Acquire (driver/postgres/election.go), every
	 * lease/3 */
	:: atomic {
		batch == 0 && ACQNEXT && !allDone ->
		if
		:: held && lockHolder != me + 1 ->
			held = false /* its lease ran out and another relay took it over */
		:: held && lockHolder == me + 1 && epoch != myep ->
			held = false; lockHolder = 0 /* renewal read a newer epoch */
		:: held && lockHolder == me + 1 && epoch == myep -> skip
		:: !held && lockHolder == 0 ->
			/* the takeover of a released or run-out lease bumps the epoch */
			lockHolder = me + 1; held = true; epoch++; myep = epoch;
#ifdef KAFKA
			rearm = true /* OnElection */
#endif
		:: !held && lockHolder != 0 -> skip
		fi;
		SETACQ(held)
	   }
#endif

#ifdef KAFKA
	/* step kafka-open: TransactionalSender.rearm, beside the claim loop
	 * after an election win, and healIfLeader for a leader left fenced.
	 * It waits for every lane, so never inside a transaction; a batch
	 * may be claimed, or sent and not yet settled. */
	:: atomic { stage == 0 && (rearm || (kfenced && ELECTED)) ->
		KOPEN; opened = true; kfenced = false; rearm = false }
#endif

	/* step claim: claim.sql, one statement */
	:: atomic {
		batch == 0 && CLAIMNEXT && !allDone ->
		elig = 0; SETACQ(false);
		if
		:: FENCE_OK ->
			for (i : 0 .. N-1) {
				if
				:: st[i] == PENDING && due[i] == 0 && FREE(i) ->
#if !defined(UNORDERED) && !defined(BUG_CLAIM_IGNORES_ORDER)
					/* NOT EXISTS an older pending row of the key */
					for (j : 0 .. N-1) {
						if
						:: j < i && KEY(j) == KEY(i) && BLOCKS(j) -> goto older
						:: else
						fi
					}
#endif
					elig = elig | BIT(i);
				older: skip
				:: else
				fi
			}
		:: else /* the epoch moved: claim nothing */
		fi;
		/* Any non-empty set of at most LIMIT of them: ORDER BY
		 * available_at follows retries the model does not date, SKIP
		 * LOCKED passes over rows other statements hold, and a claim
		 * that ran before a row was enqueued did not see it. */
		want = LIMIT;
		for (i : 0 .. N-1) {
			if
			:: HAS(elig, i) && want > 0 -> batch = batch | BIT(i); want--
			:: HAS(elig, i) -> skip
			:: else
			fi
		}
		if
		:: batch == 0 && elig != 0 -> /* the first one, then */
			for (i : 0 .. N-1) {
				if :: batch == 0 && HAS(elig, i) -> batch = BIT(i) :: else fi
			}
		:: else
		fi;
		if
		:: batch != 0 ->
#ifndef NOELECTION
			assert(myep >= claimedEpoch); /* at most one epoch claims at a time */
			claimedEpoch = myep;
#endif
			for (i : 0 .. N-1) {
				if
				:: HAS(batch, i) ->
					tok[i] = me + 1; lease[i] = LEASE;
					COUNT(i)
				:: else
				fi
			}
		:: else
		fi;
		todo = batch; SETBATCH(batch); mk = false
	   }

#ifdef AMO
	/* step mark: mark.sql, one statement committed synchronously before
	 * anything of the batch is sent: the rows still leased to this token
	 * are marked; the others are not sent (and their release is fenced) */
	:: atomic {
		todo != 0 && !mk ->
		for (i : 0 .. N-1) {
			if
			:: HAS(todo, i) && st[i] == PENDING && tok[i] == me + 1 && lease[i] > 0 && !marked[i] ->
#ifndef BUG_AMO_SEND_UNMARKED
				marked[i] = true
#else
				skip
#endif
			:: HAS(todo, i) -> out[i] = O_RELEASE; todo = todo & ~BIT(i)
			:: else
			fi
		}
		mk = true
	   }

	/* step probe: the reconcile probe (relay.reconcile): claim_in_doubt.sql
	 * takes one row in doubt (marked, its lease over), and the receiver's
	 * own record answers: applied, not applied (one more attempt), or no
	 * answer (in doubt still). The settle step records it. */
	:: atomic {
		batch == 0 && CLAIMNEXT && !allDone && FENCE_OK ->
		for (i : 0 .. N-1) {
			if
			:: batch == 0 && st[i] == PENDING && marked[i] && lease[i] == 0 ->
				batch = BIT(i); tok[i] = me + 1; lease[i] = LEASE;
				if
				:: applied[i] > 0 -> out[i] = O_OK
				:: applied[i] == 0 -> out[i] = O_RETRY
				:: true -> out[i] = O_DOUBT
				fi
			:: else
			fi
		}
		todo = 0; mk = true; SETBATCH(batch)
	   }
#endif

#ifndef KAFKA
	/* step send: relay.deliver, each row on its own goroutine, in any order */
	:: MARKED && HAS(todo, 0) -> send(0)
#if N > 1
	:: MARKED && HAS(todo, 1) -> send(1)
#endif
#if N > 2
	:: MARKED && HAS(todo, 2) -> send(2)
#endif
#if N > 3
	:: MARKED && HAS(todo, 3) -> send(3)
#endif
#else
	/* step kafka-reserve: TransactionalSender.SendBatch
	 * (transport/kafka/transactional.go), ensureOpen and reserve. Rows a
	 * position record shows committed are answered delivered without
	 * producing them. */
	:: atomic {
		todo != 0 && stage == 0 ->
		if
		:: kfenced -> /* a fenced sender registers again only when elected */
			for (i : 0 .. N-1) { if :: HAS(todo, i) -> FAILED(i) :: else fi }
			todo = 0
		:: else ->
			if :: !opened -> KOPEN; opened = true :: else fi;
#ifdef BUG_KAFKA_NO_RECONCILE
			elig = 0;
#else
			elig = todo & known;
#endif
			for (i : 0 .. N-1) { if :: HAS(elig, i) -> out[i] = O_OK :: else fi }
			todo = todo & ~elig;
			if :: todo != 0 -> stage = 1 :: else fi
		fi
	   }
	/* step kafka-produce: BeginTransaction, Produce the rows and the position
	 * record, Flush */
	:: atomic {
		stage == 1 ->
		if
		:: kcur == me + 1 -> txnOpen = true; txnRows = todo; stage = 2;
#ifdef BUG_KAFKA_KNOWN_BEFORE_COMMIT
			known = known | todo /* the bug: remembered before the commit */
#endif
		:: kcur == me + 1 && kfaults > 0 -> /* a record failed: abort, retry */
			kfaults--;
			for (i : 0 .. N-1) { if :: HAS(todo, i) -> FAILED(i) :: else fi }
			todo = 0; stage = 0
		:: kcur != me + 1 -> /* a newer producer holds the id */
			kfenced = true;
			for (i : 0 .. N-1) { if :: HAS(todo, i) -> FAILED(i) :: else fi }
			todo = 0; stage = 0
		fi
	   }
	/* step kafka-commit: EndTransaction(TryCommit) */
	:: atomic {
		stage == 2 ->
		if
		:: kcur == me + 1 && txnOpen ->
			for (i : 0 .. N-1) {
				if
				:: HAS(txnRows, i) ->
					kcommitted[i]++;
					assert(kcommitted[i] <= 1); /* no row produced twice for read_committed */
					arrive(i)
				:: else
				fi
			}
			known = known | txnRows;
#ifndef BUG_KAFKA_POSITIONS_OUTSIDE_TXN
			record = known; /* the record commits with the batch */
#endif
			txnOpen = false; txnRows = 0;
			if
			:: true -> for (i : 0 .. N-1) { if :: HAS(todo, i) -> out[i] = O_OK :: else fi }
			:: kfaults > 0 -> /* committed, but the answer was lost: reopen and look */
				kfaults--; KOPEN;
				for (i : 0 .. N-1) {
					if
					:: HAS(todo, i) && HAS(known, i) -> out[i] = O_OK
					:: HAS(todo, i) && !HAS(known, i) -> FAILED(i)
					:: else
					fi
				}
			fi
		:: kcur == me + 1 && txnOpen && kfaults > 0 ->
			/* the coordinator aborted it (transaction timeout), bumping the epoch */
			kfaults--; kcur = 0; txnOpen = false; txnRows = 0; kfenced = true;
			for (i : 0 .. N-1) { if :: HAS(todo, i) -> FAILED(i) :: else fi }
		:: else -> /* a newer producer fenced this one and aborted it */
			kfenced = true;
			for (i : 0 .. N-1) { if :: HAS(todo, i) -> FAILED(i) :: else fi }
		fi;
		todo = 0; stage = 0
	   }
#ifdef BUG_KAFKA_POSITIONS_OUTSIDE_TXN
	/* the bug: the record is written after the commit, on its own */
	:: atomic { todo == 0 && batch != 0 && record != known -> record = known }
#endif
#endif

	/* step settle: relay.settle, the four guarded statements in one
	 * transaction */
	:: atomic {
		batch != 0 && todo == 0 ->
		for (i : 0 .. N-1) {
			if
			:: HAS(batch, i) && st[i] == PENDING && TOKEN_OK(i) && LEASE_OK(i) ->
				assert(tok[i] == me + 1 && lease[i] > 0); /* no settle by a relay whose lease passed */
				if
				:: out[i] == O_OK ->
					assert(got[i]); /* nothing is marked delivered that was not */
					st[i] = DELIVERED
				:: out[i] == O_DEAD -> st[i] = DEAD
				:: out[i] == O_RETRY -> due[i] = DELAY; UNMARK(i)
				:: out[i] == O_RELEASE -> UNCOUNT(i); UNMARK(i)
				:: out[i] == O_DOUBT -> skip /* the mark stays: never claimed again */
				fi;
				tok[i] = 0; lease[i] = 0
			:: else /* fenced or expired: left as it is */
			fi;
			out[i] = O_NONE
		}
		batch = 0; SETBATCH(0);
		if
		:: stopping -> /* then Release gives the lease up */
			if :: lockHolder == me + 1 -> lockHolder = 0 :: else fi;
			goto start
		:: else
		fi
	   }

	/* ---- faults ---- */
	/* step settle-refused: the database refused the settle (an error, not a
	 * fence) until the lease ran out (settler.settleWithRetry): nothing of it
	 * was recorded, and the batch is left to its leases */
	:: atomic {
		settlefails > 0 && batch != 0 && todo == 0 && !stopping -> settlefails--;
		for (i : 0 .. N-1) { out[i] = O_NONE }
		batch = 0; SETBATCH(0)
	   }
	/* step crash: the process dies; its election lease runs out later, but
	 * a dead process does nothing meanwhile, so freeing it at once reaches
	 * the same states; the batch's rows stay leased until their lease
	 * passes. (A Stop between batches has the same effect: Release gives
	 * the lease up.) */
	:: atomic {
		crashes > 0 && (held || batch != 0) -> crashes--;
		if :: lockHolder == me + 1 -> lockHolder = 0 :: else fi;
		goto start
	   }
	/* step stop: a Stop whose deadline passed: the rows not tried are
	 * released, the batch settles, then the lease is given up */
	:: atomic {
		stops > 0 && todo != 0 && !stopping && STAGE_IDLE -> stops--; stopping = true;
		for (i : 0 .. N-1) { if :: HAS(todo, i) -> out[i] = O_RELEASE :: else fi }
		todo = 0
	   }
#ifndef NOELECTION
	/* step session-loss: the election lease of a paused or cut-off leader
	 * ran out: another relay may take it over, and this process believes
	 * it leads until its next Acquire */
	:: atomic { sessionloss > 0 && lockHolder == me + 1 -> sessionloss--; lockHolder = 0 }
#endif
	od
}

/* ---- the database clock ---- */
/* step clock: now() moves on, and leases and retry delays with it */
#define TICK for (i : 0 .. N-1) { \
		if :: lease[i] > 0 -> lease[i]-- :: else fi; \
		if :: due[i] > 0 -> due[i]-- :: else fi }
/* a lease that ends at the next tick, of a relay still running its batch */
#define URGENT(x) (lease[x] == 1 && tok[x] > 0 && HAS(inbatch[tok[x] - 1], x))
#if N == 1
#define WAITING   (lease[0] + due[0] > 0)
#define ANYURGENT URGENT(0)
#elif N == 2
#define WAITING   (lease[0] + due[0] + lease[1] + due[1] > 0)
#define ANYURGENT (URGENT(0) || URGENT(1))
#elif N == 3
#define WAITING   (lease[0] + due[0] + lease[1] + due[1] + lease[2] + due[2] > 0)
#define ANYURGENT (URGENT(0) || URGENT(1) || URGENT(2))
#else
#define WAITING   (lease[0] + due[0] + lease[1] + due[1] + lease[2] + due[2] + lease[3] + due[3] > 0)
#define ANYURGENT (URGENT(0) || URGENT(1) || URGENT(2) || URGENT(3))
#endif

proctype clock() {
	do
	:: allDone -> break
#ifdef LIVE
	/* The liveness run's timing assumption: a running relay settles its
	 * batch before the lease ends, except SLOW times. */
	:: atomic { WAITING && !ANYURGENT -> TICK }
	:: atomic { WAITING && ANYURGENT && slow > 0 -> slow--; TICK }
#else
	:: atomic { WAITING -> TICK }
#endif
	od
}

/* step enqueue: the N rows are committed, pending, before the relays
 * start (a claim that ran before a row was committed did not see it: the
 * claim may leave any row out) */
init {
	atomic {
		for (i : 0 .. R-1) { run relay(i) }
		run clock()
	}
}

#ifdef LIVE
/* every committed message ends delivered or dead */
ltl done { <> allDone }
#endif
