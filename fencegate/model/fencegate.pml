/*
 * fencegate.pml: Redlock leases, fencing tokens and the gateway's fence,
 * checked by spin over every interleaving of a small system.
 *
 * Select one variant (the lab's modes, plus designs DESIGN.md and STYLE.md reject):
 *   -DREDIS_ONLY    lease, then read and write with no token check
 *   -DFENCED        token drawn before the quorum, every request through the fence
 *   -DFENCED_LATE_CLOCK  like FENCED, but the validity clock starts after the token
 *                   is drawn (a stall while drawing goes unnoticed by the lease)
 *   -DSPLIT_FENCE   like FENCED, but the gateway reads the mark, compares, and
 *                   writes in a later step (what STYLE.md habit 7 forbids)
 *   -DUNFENCED_READS  like FENCED, but reads carry no token (only writes are fenced)
 *   -DFENCE_ONLY    token and fence, no lock
 *   -DTOKEN_AFTER   like FENCED, but the token is drawn after the quorum
 *   -DTOKEN_REGRESS like FENCED, but the token source may restart without its
 *                   counter and issue tokens from 1 again (a node fault's budget)
 *   -DANY_RESOURCE  like FENCED, but each request names one of two resources for the
 *                   one key (the lock's name or the key itself) and the gateway checks
 *                   only that resource's mark; a client that reads the counter as 0
 *                   may write it by DELETE, then PUT (a recreate)
 *   -DBOUND_RESOURCE  like ANY_RESOURCE, but the key belongs to the resource of the
 *                   first fenced request accepted on it; a request naming another is
 *                   refused and changes nothing; a DELETE keeps the binding (tombstone)
 *   -DBOUND_ON_CREATE  like BOUND_RESOURCE, but only the write that creates the key
 *                   binds it (a fenced read of the absent key binds nothing)
 *   -DBOUND_UNTIL_DELETE  like BOUND_RESOURCE, but a DELETE frees the key (no tombstone)
 * Sizes: -DK=clients -DN=nodes -DOPS=acquisitions per client
 *        -DMAXT=TTL expiries -DMAXF=node faults (restart or clock jump; with
 *        TOKEN_REGRESS also the token source's restart).
 * -DMAXT=0 lets no TTL pass (no pause, no delay); -DMAXF=0 leaves the nodes alone.
 * Properties are the ltl blocks at the end, one per pan run (./pan -N name), so
 * one property's counterexample never ends the search for another:
 *   interleave     the store never accepts a request from lease A after one from
 *                  a later lease B ("later": token order where leases carry
 *                  tokens, acquisition order otherwise: the lab checker's rule;
 *                  where two leases can share a token, any A, B, A)
 *   lost_update    once every client is done, counter == acknowledged increments
 *   mark_monotone  the fence's high-water mark never decreases
 *   grant_order    the store accepts requests in the lock's grant order, even
 *                  where tokens exist (not promised by fencing: it shows whose
 *                  side the fence takes when two leases overlap)
 *
 * Time is abstract. A "tick" is the adversary letting a whole TTL pass at
 * once: every key then in Redis expires, every lease then held is over, and
 * an attempt that was in flight fails its validity check. A client never
 * looks at a clock after acquiring, so a tick anywhere in its lease is a
 * pause past expiry; a tick while its request is in flight is a message
 * delayed past the TTL. A node fault removes one node's key early: a restart
 * without persistence, or a clock jump forward on that node.
 *
 * Every printf line starting with "EV" is an event for model/trail.py:
 *   EV <kind> <client> <acquisition> <token> <outcome> <value> <seq> <detail> <arg>
 * client and acquisition are 0-based and 1-based; 0 means "none" for token,
 * acquisition and seq; -1 means "none" for value and arg.
 */

#ifndef K
#define K 2
#endif
#ifndef N
#define N 3
#endif
#ifndef OPS
#define OPS 1
#endif
#ifndef MAXT
#define MAXT 1
#endif
#ifndef MAXF
#define MAXF 1
#endif

#if defined(REDIS_ONLY)
#define LOCK 1
#define FENCE 0
#define TOKEN_BEFORE 0
#elif defined(FENCED)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#elif defined(FENCED_LATE_CLOCK)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define LATE_CLOCK 1
#elif defined(SPLIT_FENCE)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define SPLIT 1
#elif defined(UNFENCED_READS)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define BARE_READS 1
#elif defined(FENCE_ONLY)
#define LOCK 0
#define FENCE 1
#define TOKEN_BEFORE 1
#elif defined(TOKEN_AFTER)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 0
#elif defined(TOKEN_REGRESS)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define REGRESS 1
#elif defined(ANY_RESOURCE)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define NAMES 2
#elif defined(BOUND_RESOURCE)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define NAMES 2
#define BIND 1
#define BIND_FIRST 1
#elif defined(BOUND_ON_CREATE)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define NAMES 2
#define BIND 1
#elif defined(BOUND_UNTIL_DELETE)
#define LOCK 1
#define FENCE 1
#define TOKEN_BEFORE 1
#define NAMES 2
#define BIND 1
#define BIND_FIRST 1
#define UNBIND 1
#else
#error "pick a variant: REDIS_ONLY FENCED FENCED_LATE_CLOCK SPLIT_FENCE UNFENCED_READS FENCE_ONLY TOKEN_AFTER TOKEN_REGRESS ANY_RESOURCE BOUND_RESOURCE BOUND_ON_CREATE BOUND_UNTIL_DELETE"
#endif
#ifndef LATE_CLOCK
#define LATE_CLOCK 0
#endif
#ifndef SPLIT
#define SPLIT 0
#endif
#ifndef BARE_READS
#define BARE_READS 0
#endif
#ifndef REGRESS
#define REGRESS 0       /* the token source may restart without its counter and issue tokens again */
#endif
#ifndef NAMES
#define NAMES 1         /* resources a request may name for the one key */
#endif
#ifndef BIND
#define BIND 0          /* the key belongs to one resource; requests naming another are refused */
#endif
#ifndef BIND_FIRST
#define BIND_FIRST 0    /* any fenced request binds an unbound key, not only the write creating it */
#endif
#ifndef UNBIND
#define UNBIND 0        /* a DELETE frees the key's binding */
#endif
#if NAMES > 1
#define RES r           /* the resource this request names: 0 the lock's name, 1 the key */
#define NAMED (r + 1)   /* printed on the request's events: 1 the lock's name, 2 the key */
#else
#define RES 0
#define NAMED -1
#endif
#if BARE_READS
#define READ_TOKEN 0    /* a GET without Fencing-Token: served as is, the mark untouched */
#else
#define READ_TOKEN tok
#endif

#define QUORUM (N / 2 + 1)
#define LEASES (K * OPS)

/* the system */
byte now;               /* TTLs passed so far */
byte faults;            /* node faults so far */
byte node[N];           /* the lock key on each Redis master: the lease holding it, 0 = none */
byte tokens;            /* the token source: last token issued */
byte mark[NAMES];       /* the gateway's high-water mark per resource */
byte owner;             /* the resource the key belongs to, plus 1; 0 = none yet (BIND only) */
byte counter;           /* the object the workload increments (absent reads as 0) */
byte seq;               /* the store's acceptance order */

/* ghosts: what the properties and the trail need, invisible to the protocol */
byte acked;             /* writes the store acknowledged */
byte grants;            /* leases granted so far, in grant order */
byte grank[LEASES + 1]; /* lease -> its place in grant order */
byte rank[LEASES + 1];  /* lease -> its order for the lab checker's rule */
byte maxrank;           /* highest rank the store has accepted a request from */
byte maxgrank;          /* highest grant rank the store has accepted a request from */
bool live[LEASES + 1];  /* granted, and neither expired nor released */
byte phase[K];          /* 0 idle or done, 1 in an attempt or a lease, 2 with a request in flight */
byte bad;               /* properties broken so far: 1 lab order, 2 grant order, 4 mark decreased */
byte done;              /* clients finished */
#if REGRESS
byte last;              /* the lease of the last request the store accepted */
bool gone[LEASES + 1];  /* the store accepted another lease's request after one of this lease */
#endif

/* The store accepted a request of lease l: note any break of the two orders. */
inline accepted(l) {
    seq++;
    if
    :: rank[l] < maxrank -> bad = bad | 1
    :: else -> maxrank = rank[l]
    fi;
#if REGRESS
    /* Two leases may carry one token here, and token order alone then lets A, B, A
       through; elsewhere every lease has its own token, and token order implies this. */
    if
    :: gone[l] -> bad = bad | 1
    :: else
    fi;
    if
    :: last != 0 && last != l -> gone[last] = true
    :: else
    fi;
    last = l;
#endif
    if
    :: grank[l] < maxgrank -> bad = bad | 2
    :: else -> maxgrank = grank[l]
    fi
}

/* The gateway's fence. Atomic variants check and raise in one transaction;
   SPLIT checks in the step before (`ok` holds that earlier answer). The mark
   is the named resource's (there is one resource unless NAMES > 1). */
inline fence_check(tok, ok) {
    ok = !(FENCE && tok < mark[RES])
}

inline fence_raise(tok) {
    if
    :: FENCE ->
        if
        :: tok < mark[RES] -> bad = bad | 4
        :: else
        fi;
        mark[RES] = tok
    :: else
    fi
}

#if BIND
/* A key bound to another resource than the one named is refused (why = 2)
   before any mark is looked at: the request changes nothing, not even the
   named resource's mark. */
inline gate(tok, ok) {
    if
    :: owner != 0 && owner != RES + 1 -> ok = false; why = 2
    :: else -> fence_check(tok, ok)
    fi
}

/* An accepted request binds a key bound to no resource to the one it named:
   the write that creates it, and with BIND_FIRST any fenced request, a read
   of the absent key included (so that a stale writer cannot create the key
   under another name after a newer lease has read it as absent). */
inline bind() {
    if
    :: owner == 0 ->
        owner = RES + 1;
        printf("EV bind %d %d %d ok -1 0 - %d\n", c, it, tok, owner)
    :: else
    fi
}
#define BIND_KEY bind();
#else
inline gate(tok, ok) {
    fence_check(tok, ok)
}
#define BIND_KEY
#endif
#if BIND_FIRST
#define BIND_FIRST_KEY bind();
#else
#define BIND_FIRST_KEY
#endif

/* The resource a request names: any of the NAMES, chosen anew for each request
   (a stale writer may name a fresh one), and forgotten once it is served. The
   macros expand to nothing where there is one resource, so the other variants'
   steps stay exactly as they were. */
#if NAMES > 1
#define NAME select(r : 0 .. NAMES - 1);
#define FORGET_NAME r = 0;
#else
#define NAME
#define FORGET_NAME
#endif

/* Compare-and-delete on every node, one Redis command each (success or not). */
inline release_all(l, i) {
    i = 0;
    do
    :: i < N ->
        atomic {
            if
            :: node[i] == l -> node[i] = 0
            :: else
            fi;
            i++
        }
    :: else -> i = 0; break
    od
}

proctype Client(byte c) {
    byte it;        /* acquisitions so far */
    byte l;         /* this acquisition's lease id */
    byte tok;       /* its token, 0 = none */
    byte start;     /* the abstract time the attempt started (the validity clock) */
    byte got;       /* SET NX successes */
    byte i;
    byte v;         /* the counter value read */
    bool ok;
#if NAMES > 1
    byte r;         /* the resource the current request names */
#endif
#if BIND
    byte why;       /* 2 when the gateway refused a request for naming the wrong resource */
#endif

    do
    :: it == OPS -> break
    :: it < OPS ->
        it++;
        l = c * OPS + it;
        tok = 0;
#if LOCK
        atomic {
            /* the validity clock starts before the token is drawn: a stall while
               drawing counts against the lease like any other part of the attempt */
#if !LATE_CLOCK
            start = now;
#endif
            phase[c] = 1;
#if TOKEN_BEFORE
            tokens++;
            tok = tokens;
            rank[l] = tok;
            printf("EV token %d %d %d ok -1 0 before -1\n", c, it, tok)
#endif
        };
#if LATE_CLOCK
        start = now;
#endif
        got = 0;
        i = 0;
        do
        :: i < N ->
            atomic {
                if
                :: node[i] == 0 -> node[i] = l; got++
                :: else
                fi;
                i++
            }
        :: else -> break
        od;
        if
        :: atomic {
            got >= QUORUM && now == start ->
                grants++;
                grank[l] = grants;
                live[l] = true;
#if !FENCE
                rank[l] = grants;
#endif
                printf("EV acquire %d %d %d ok -1 0 quorum %d\n", c, it, tok, got);
                got = 0;
                i = 0;
                start = 0
            }
        :: else ->
            atomic {
                if
                :: got < QUORUM -> printf("EV acquire %d %d %d refused -1 0 no-quorum %d\n", c, it, tok, got)
                :: else -> printf("EV acquire %d %d %d refused -1 0 validity %d\n", c, it, tok, got)
                fi;
                got = 0;
                start = 0
            };
            release_all(l, i);
            atomic { tok = 0; phase[c] = 0 };
            goto next
        fi;
#if FENCE && !TOKEN_BEFORE
        atomic {
            tokens++;
            tok = tokens;
            rank[l] = tok;
            printf("EV token %d %d %d ok -1 0 after -1\n", c, it, tok)
        };
#endif
#else
        atomic {
            tokens++;
            tok = tokens;
            rank[l] = tok;
            grants++;
            grank[l] = grants;
            phase[c] = 1;
            printf("EV acquire %d %d %d ok -1 0 token-only -1\n", c, it, tok)
        };
#endif
        /* read: the request leaves, and the gateway handles it whenever the adversary lets it */
        atomic { NAME phase[c] = 2; printf("EV read %d %d %d sent -1 0 - %d\n", c, it, READ_TOKEN, NAMED) };
#if SPLIT
        atomic { fence_check(tok, ok); printf("EV check %d %d %d ok -1 0 - %d\n", c, it, tok, mark[RES]) };
#endif
        atomic {
#if BARE_READS
            ok = true;
#elif !SPLIT
            gate(tok, ok);
#endif
            if
            :: ok ->
#if !BARE_READS
                fence_raise(tok);
                BIND_FIRST_KEY
#endif
                accepted(l);
                v = counter;
                printf("EV read %d %d %d ok %d %d - %d\n", c, it, READ_TOKEN, v, seq, NAMED)
#if BIND
            :: !ok && why == 2 -> printf("EV read %d %d %d refused -1 0 wrong-resource %d\n", c, it, tok, owner)
#endif
            :: else -> printf("EV read %d %d %d refused -1 0 stale %d\n", c, it, tok, mark[RES])
            fi;
#if BIND
            why = 0;
#endif
            FORGET_NAME
            phase[c] = 1
        };
#if NAMES > 1
        /* a client that read the counter as 0 may recreate it: DELETE, then PUT */
        if
        :: true -> skip
        :: ok && v == 0 ->
            atomic { NAME phase[c] = 2; printf("EV delete %d %d %d sent -1 0 - %d\n", c, it, tok, NAMED) };
            atomic {
                gate(tok, ok);
                if
                :: ok ->
                    fence_raise(tok);
                    BIND_FIRST_KEY
                    accepted(l);
                    counter = 0;
#if UNBIND
                    owner = 0;
                    printf("EV delete %d %d %d ok -1 %d unbind %d\n", c, it, tok, seq, NAMED)
#else
                    printf("EV delete %d %d %d ok -1 %d - %d\n", c, it, tok, seq, NAMED)
#endif
#if BIND
                :: !ok && why == 2 -> printf("EV delete %d %d %d refused -1 0 wrong-resource %d\n", c, it, tok, owner)
#endif
                :: else -> printf("EV delete %d %d %d refused -1 0 stale %d\n", c, it, tok, mark[RES])
                fi;
#if BIND
                why = 0;
#endif
                FORGET_NAME
                phase[c] = 1
            }
        fi;
#endif
        if
        :: ok ->
            atomic { NAME phase[c] = 2; printf("EV write %d %d %d sent %d 0 - %d\n", c, it, tok, v + 1, NAMED) };
#if SPLIT
            atomic { fence_check(tok, ok); printf("EV check %d %d %d ok -1 0 - %d\n", c, it, tok, mark[RES]) };
#endif
            atomic {
#if !SPLIT
                gate(tok, ok);
#endif
                if
                :: ok ->
                    fence_raise(tok);
                    BIND_KEY
                    accepted(l);
                    counter = v + 1;
                    acked++;
                    printf("EV write %d %d %d ok %d %d - %d\n", c, it, tok, v + 1, seq, NAMED)
#if BIND
                :: !ok && why == 2 -> printf("EV write %d %d %d refused %d 0 wrong-resource %d\n", c, it, tok, v + 1, owner)
#endif
                :: else -> printf("EV write %d %d %d refused %d 0 stale %d\n", c, it, tok, v + 1, mark[RES])
                fi;
#if BIND
                why = 0;
#endif
                FORGET_NAME
                v = 0;
                ok = false;
                phase[c] = 1
            }
        :: else
        fi;
#if LOCK
        release_all(l, i);
        atomic {
            if
            :: live[l] -> live[l] = false; printf("EV release %d %d %d ok -1 0 - -1\n", c, it, tok)
            :: else -> printf("EV release %d %d %d error -1 0 expired -1\n", c, it, tok)
            fi;
            tok = 0;
            phase[c] = 0
        };
#else
        phase[c] = 0;
#endif
next:
        skip
    od;
    atomic {
        got = 0; i = 0; v = 0; ok = false; l = 0; tok = 0; start = 0;
        done++
    }
}

/* The adversary: TTLs passing (pauses, delays), node restarts and clock jumps,
   and with REGRESS the token source's restart. */
active proctype Adversary() {
    byte i;
    byte l;
end:
    do
    :: atomic {
        now < MAXT && done < K ->
            now++;
            i = 0;
            do
            :: i < K ->
                if
                :: phase[i] == 1 -> printf("EV pause %d 0 0 ok -1 0 ttl -1\n", i)
                :: phase[i] == 2 -> printf("EV fault %d 0 0 ok -1 0 delayed -1\n", i)
                :: else
                fi;
                i++
            :: else -> break
            od;
            l = 1;
            do
            :: l <= LEASES ->
                if
                :: live[l] -> live[l] = false; printf("EV expire %d %d 0 ok -1 0 ttl -1\n", (l - 1) / OPS, (l - 1) % OPS + 1)
                :: else
                fi;
                l++
            :: else -> break
            od;
            i = 0;
            do
            :: i < N -> node[i] = 0; i++
            :: else -> break
            od;
            i = 0;
            l = 0
        }
#if LOCK
    :: atomic {
        faults < MAXF && done < K ->
            faults++;
            select(i : 0 .. N - 1);
            node[i] = 0;
            printf("EV fault -1 0 0 ok -1 0 restart %d\n", i);
            i = 0
        }
    :: atomic {
        faults < MAXF && done < K ->
            faults++;
            select(i : 0 .. N - 1);
            node[i] = 0;
            printf("EV fault -1 0 0 ok -1 0 clock-jump %d\n", i);
            i = 0
        }
#endif
#if REGRESS
    :: atomic {
        faults < MAXF && done < K ->
            faults++;
            tokens = 0;
            printf("EV fault -1 0 0 ok -1 0 token-reset -1\n")
        }
#endif
    od
}

init {
    byte c;
    atomic {
        c = 0;
        do
        :: c < K -> run Client(c); c++
        :: else -> break
        od;
        c = 0
    };
    done == K;
    printf("EV final -1 0 0 ok %d 0 - %d\n", counter, acked)
}

ltl interleave { [] ((bad & 1) == 0) }
ltl lost_update { [] (done < K || counter == acked) }
ltl mark_monotone { [] ((bad & 4) == 0) }
ltl grant_order { [] ((bad & 2) == 0) }
