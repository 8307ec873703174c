/*
 * proxy.pml: the path between fencegate's gateway (any of its replicas) and an
 * upstream store, checked by spin over every order in which that path delivers.
 *
 * The gateway keeps its fence in its database (one mark, shared by every
 * replica, raised in one transaction) and forwards each accepted request to the
 * store. The path may hold a request as long as it likes and deliver requests in
 * any order; the gateway may stop waiting for one (it answers 504, outcome
 * unknown: a timeout or a crashed replica) and the store may still receive it
 * later. Select one variant:
 *   -DTRUST_PATH     the store applies whatever arrives, as it arrives (the
 *                    unconditional proxy, `--upstream-ordering trust-path`)
 *   -DCONDITIONAL    every request the gateway sends is conditional on the version
 *                    it checked (If-Match on its ETag, If-None-Match: * for a key
 *                    with no version); each version carries its token; a 412 makes
 *                    the gateway read again and decide again; a delete writes a
 *                    tombstone carrying the deleting token, conditional the same way
 *   -DNO_TOMBSTONE   like CONDITIONAL, but a delete removes the object (DELETE with
 *                    If-Match on the checked ETag) and leaves no version behind
 *   -DBLIND_DELETE   like CONDITIONAL, but the tombstone is written unconditionally
 *   -DBARE_TOMBSTONE like CONDITIONAL, but the tombstone carries no token
 *   -DINCREMENTS     like CONDITIONAL, but each request is the lab's increment: a
 *                    fenced GET of the counter, then a PUT of the value read + 1
 *   -DREAD_RAISES    like INCREMENTS, but a fenced GET whose token is above the one
 *                    stored first writes that token onto the version it read (a PUT
 *                    of the same bytes, If-Match its ETag), as the mark is raised
 *   -DCLIENT_MATCH   like INCREMENTS, but the client's PUT carries the ETag its GET read
 *                    (If-Match, If-None-Match: * where it read nothing): the gateway
 *                    answers 412 once the version it compares against is another, and
 *                    sends on the client's ETag; a store 412 is read again: 409 above
 *                    the token, else 412, never sent again on a newer version
 * Sizes: -DK=clients -DOPS=requests per client -DMAXT=requests the gateway may stop
 * waiting for. Each client holds one token (drawn in order, as from any token
 * source; no lock: the lock only decides who believes it may write, and a
 * client past its lease is exactly a holder of an older token) and sends OPS
 * requests, each a PUT or a DELETE of the one key (an increment in INCREMENTS and
 * READ_RAISES).
 * Properties, one per pan run (./pan -N name):
 *   store_order    the store never applies a request (write, delete, tombstone) with
 *                  a lower token than one it applied before
 *   no_recreate    no write makes the key exist again with a lower token than a
 *                  delete that was done (applied at the store, or answered)
 *   acked_durable  once every client has its answers, the store's state comes
 *                  from a request whose token is at least that of every request
 *                  answered 2xx (and stays so while held requests still land)
 *   increments     once every client has its answers, the counter at the store is at
 *                  least the increments answered 2xx (vacuous where clients write
 *                  blind: their writes count no increment)
 *
 * Every printf line starting with "EV" is an event for model/trail.py, in the
 * format of fencegate.pml:
 *   EV <kind> <client> <acquisition> <token> <outcome> <value> <seq> <detail> <arg>
 * A client's one token is its acquisition 1; a written value is the writer's token.
 */

#ifndef K
#define K 2
#endif
#ifndef OPS
#define OPS 1
#endif
#ifndef MAXT
#define MAXT 1
#endif

#if defined(TRUST_PATH)
#define COND 0          /* requests carry a precondition */
#define TOMB 0          /* a delete writes a tombstone instead of removing the object */
#define TOMB_TOKEN 0    /* the tombstone carries the deleting token */
#define DEL_COND 0      /* the delete (or its tombstone) is conditional */
#elif defined(CONDITIONAL)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 1
#define DEL_COND 1
#elif defined(NO_TOMBSTONE)
#define COND 1
#define TOMB 0
#define TOMB_TOKEN 0
#define DEL_COND 1
#elif defined(BLIND_DELETE)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 1
#define DEL_COND 0
#elif defined(BARE_TOMBSTONE)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 0
#define DEL_COND 1
#elif defined(INCREMENTS)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 1
#define DEL_COND 1
#define INCR 1
#elif defined(READ_RAISES)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 1
#define DEL_COND 1
#define INCR 1
#define RAISE 1
#elif defined(CLIENT_MATCH)
#define COND 1
#define TOMB 1
#define TOMB_TOKEN 1
#define DEL_COND 1
#define INCR 1
#define CMATCH 1
#else
#error "pick a variant: TRUST_PATH CONDITIONAL NO_TOMBSTONE BLIND_DELETE BARE_TOMBSTONE INCREMENTS READ_RAISES CLIENT_MATCH"
#endif
#ifndef INCR
#define INCR 0          /* each request is a fenced read, then a write of the value read + 1 */
#endif
#ifndef RAISE
#define RAISE 0         /* a fenced read writes its token onto the version it read */
#endif
#ifndef CMATCH
#define CMATCH 0        /* the client's write is conditional on the ETag its read returned */
#endif
#define WVAL (INCR -> v + 1 : tok)  /* the bytes a PUT writes: the counter read + 1, or the writer's token */

#define SLOTS (K * OPS)
#define RETRIES 1       /* a 412 is followed by one new read and one new attempt, then 503 */
#define PUT 1
#define DEL 2           /* a real DELETE */
#define TOMBSTONE 3     /* a PUT of the tombstone marker */
#define RAISED 4        /* a PUT of the version's own bytes (or tombstone) with the reader's token */
#define IF_MATCH 1
#define IF_NONE 2       /* If-None-Match: * */
#define APPLIED 1
#define FAILED 2        /* 412 Precondition Failed */

/* the store: one key */
byte etag;              /* the current version's ETag, 0 = no version at all */
byte stok;              /* the token the current version carries as metadata, 0 = none */
bool tomb;              /* the current version is a tombstone */
byte versions;          /* ETags issued so far: every version has its own */
byte seq;               /* the store's order of the requests it applied (and of the reads it served) */
byte value;             /* the counter the current version holds (0 for none or a tombstone) */

/* the gateway's database, shared by every replica */
byte mark;
byte tokens;            /* the token source: last token issued */

/* the path: one slot per request; a courier per slot delivers it whenever it likes */
byte pkind[SLOTS];      /* 0 empty, else PUT, DEL or TOMBSTONE */
byte ptok[SLOTS];
byte pval[SLOTS];       /* the bytes of a PUT: the counter value */
byte pcond[SLOTS];      /* 0 none, IF_MATCH petag, IF_NONE */
byte petag[SLOTS];      /* the ETag of the condition; once applied, of the version made */
byte presp[SLOTS];      /* 0 not delivered yet, APPLIED, FAILED */
byte pseq[SLOTS];       /* the store's seq when applied */
bool pwait[SLOTS];      /* a gateway still waits for the answer */

/* ghosts: what the properties and the trail need, invisible to the protocol */
byte counter;           /* the token of the request that made the store's current state */
byte acked;             /* the highest token of a request answered 2xx */
byte incs;              /* increments answered 2xx */
byte maxap;             /* the highest token the store has applied */
byte delmax;            /* the highest token of a delete done */
byte timeouts;          /* requests the gateway stopped waiting for */
byte bad;               /* properties broken so far: 1 store order, 2 recreated after a delete */
byte done;              /* clients with all their answers */

inline clear(s) {
    pkind[s] = 0; ptok[s] = 0; pval[s] = 0; pcond[s] = 0; petag[s] = 0; presp[s] = 0; pseq[s] = 0; pwait[s] = false
}

/* The store applies the request in slot s: a new version, or none left by a DELETE. */
inline apply(s) {
    seq++;
    pseq[s] = seq;
    if
    :: ptok[s] < maxap -> bad = bad | 1
    :: else -> maxap = ptok[s]
    fi;
    if
    :: pkind[s] == PUT ->
        if
        :: (etag == 0 || tomb) && ptok[s] < delmax -> bad = bad | 2
        :: else
        fi;
        versions++; etag = versions; stok = ptok[s]; tomb = false; value = pval[s]
    :: pkind[s] == DEL -> etag = 0; stok = 0; tomb = false; value = 0
    :: pkind[s] == RAISED ->  /* over no version: a tombstone carrying the token */
        tomb = (etag == 0 -> true : tomb); versions++; etag = versions; stok = ptok[s]
    :: pkind[s] == TOMBSTONE ->
        versions++; etag = versions; tomb = true; value = 0;
        stok = (TOMB_TOKEN -> ptok[s] : 0)
    fi;
    if
    :: (pkind[s] == DEL || pkind[s] == TOMBSTONE) && ptok[s] > delmax -> delmax = ptok[s]
    :: else
    fi;
    counter = ptok[s]
}

/* One delivery: the store checks the precondition and applies the request, or answers 412. */
proctype Courier(byte s) {
end:
    do
    :: atomic {
        pkind[s] != 0 && presp[s] == 0 ->
            if
            :: pcond[s] == IF_MATCH && etag != petag[s] -> presp[s] = FAILED
            :: pcond[s] == IF_NONE && etag != 0 -> presp[s] = FAILED
            :: else -> apply(s); presp[s] = APPLIED; petag[s] = etag  /* from now on: the version it made */
            fi;
            /* detail: what was sent, plus 10 when no gateway waits for the answer any more */
            if
            :: presp[s] == APPLIED ->
                printf("EV store %d 1 %d ok %d %d %d %d\n", s / OPS, ptok[s], (pkind[s] == PUT -> pval[s] : -1),
                       pseq[s], pkind[s] + (pwait[s] -> 0 : 10), etag)
            :: !pwait[s] && presp[s] == FAILED ->
                printf("EV store %d 1 %d refused -1 0 %d %d\n", s / OPS, ptok[s], pkind[s] + 10, etag)
            :: else
            fi;
            if
            :: !pwait[s] -> clear(s)
            :: else
            fi
        }
    od
}

proctype Client(byte c) {
    byte it;        /* requests sent so far */
    byte tok;       /* this client's token */
    byte k;         /* this request: PUT or a delete */
    byte s;         /* its slot on the path */
    byte ce;        /* the version the gateway checked: its ETag (0 none) */
    byte ct;        /* and the token it carries */
    bool obj;       /* that version is an object, not a tombstone */
    byte tries;
    byte v;         /* the counter value read (INCR) */
    byte i;         /* the store's seq of that read */
    byte re;        /* the ETag that read returned (CMATCH: the client's If-Match) */

    atomic {
        tokens++;
        tok = tokens;
        printf("EV acquire %d 1 %d ok -1 0 token-only -1\n", c, tok)
    };
    do
    :: it == OPS -> break
    :: it < OPS ->
        atomic {
            it++;
            s = c * OPS + it - 1;
#if INCR
            k = PUT;
            printf("EV read %d 1 %d sent -1 0 - -1\n", c, tok)
#else
            if
            :: k = PUT; printf("EV write %d 1 %d sent %d 0 - -1\n", c, tok, tok)
            :: k = DEL; printf("EV delete %d 1 %d sent -1 0 - -1\n", c, tok)
            fi
#endif
        };
#if INCR
        /* the fenced GET: the mark first, then the store's version */
        atomic {
            if
            :: tok < mark -> printf("EV read %d 1 %d refused -1 0 stale %d\n", c, tok, mark); goto next
            :: else -> mark = tok
            fi
        };
reread:
        atomic { ce = etag; ct = stok; v = value; seq++; i = seq; re = etag };  /* served by the store, in its order */
        if
        :: tok < ct -> printf("EV read %d 1 %d refused -1 0 stored %d\n", c, tok, ct); goto next
#if RAISE
        :: tok > ct ->
            atomic {
                ptok[s] = tok;
                pwait[s] = true;
                pkind[s] = RAISED;
                pcond[s] = (ce != 0 -> IF_MATCH : IF_NONE);
                petag[s] = ce;
                printf("EV forward %d 1 %d ok -1 0 %d %d\n", c, tok, pcond[s] * 10 + pkind[s], ce)
            };
            if
            :: atomic { presp[s] == APPLIED -> clear(s) }
            :: atomic {
                presp[s] == FAILED ->
                    clear(s);
                    tries++;
                    printf("EV precondition %d 1 %d ok -1 0 - -1\n", c, tok);
                    if
                    :: tries > RETRIES -> printf("EV read %d 1 %d error -1 0 retries -1\n", c, tok); goto next
                    :: else
                    fi
                };
                goto reread
            :: atomic {
                presp[s] == 0 && timeouts < MAXT ->
                    timeouts++;
                    pwait[s] = false;
                    printf("EV read %d 1 %d error -1 0 timeout -1\n", c, tok);
                    goto next
                }
            fi
#endif
        :: else
        fi;
        atomic {
            printf("EV read %d 1 %d ok %d %d - -1\n", c, tok, v, i);
            printf("EV write %d 1 %d sent %d 0 - -1\n", c, tok, v + 1);
            tries = 0
        };
#endif
        /* the gateway's fence: one transaction in its database */
        atomic {
            if
            :: tok < mark ->
                if
                :: k == PUT -> printf("EV write %d 1 %d refused %d 0 stale %d\n", c, tok, WVAL, mark)
                :: else -> printf("EV delete %d 1 %d refused -1 0 stale %d\n", c, tok, mark)
                fi;
                goto next
            :: else -> mark = tok
            fi
        };
        tries = 0;
again:
#if COND
        /* the version it compares against: its own record of the last write, or a read */
        atomic { ce = etag; ct = stok; obj = etag != 0 && !tomb };
#endif
        atomic {
#if COND
            if
            :: tok < ct ->
                if
                :: k == PUT -> printf("EV write %d 1 %d refused %d 0 stored %d\n", c, tok, WVAL, ct)
                :: else -> printf("EV delete %d 1 %d refused -1 0 stored %d\n", c, tok, ct)
                fi;
                goto next
#if CMATCH
            :: ce != re ->
                /* the client's precondition: the version is no longer the one it read */
                printf("EV write %d 1 %d refused %d 0 precondition %d\n", c, tok, WVAL, ce);
                goto next
#endif
#if !TOMB
            :: k == DEL && !obj ->
                /* nothing to delete: 404, and the store is left as it is */
                if
                :: tok > delmax -> delmax = tok
                :: else
                fi;
                printf("EV delete %d 1 %d ok -1 0 absent -1\n", c, tok);
                goto next
#endif
            :: else
            fi;
#endif
            ptok[s] = tok;
            pval[s] = WVAL;
            pwait[s] = true;
            pkind[s] = (k == PUT -> PUT : (TOMB -> TOMBSTONE : DEL));
            if
            :: COND && (k == PUT || DEL_COND) && ce != 0 -> pcond[s] = IF_MATCH; petag[s] = ce
            :: COND && (k == PUT || DEL_COND) && ce == 0 -> pcond[s] = IF_NONE
            :: else
            fi;
            printf("EV forward %d 1 %d ok -1 0 %d %d\n", c, tok, pcond[s] * 10 + pkind[s], ce)
        };
        /* the store's answer, or the gateway stops waiting */
        if
        :: atomic {
            presp[s] == APPLIED ->
                if
                :: tok > acked -> acked = tok
                :: else
                fi;
                incs = incs + INCR;
                if
                :: k == PUT -> printf("EV write %d 1 %d ok %d %d etag %d\n", c, tok, pval[s], pseq[s], petag[s])
                :: else -> printf("EV delete %d 1 %d ok -1 %d etag %d\n", c, tok, pseq[s], petag[s])
                fi;
                clear(s)
            }
        :: atomic {
            presp[s] == FAILED ->
                clear(s);
                tries++;
                printf("EV precondition %d 1 %d ok -1 0 - -1\n", c, tok);
                if
                :: tries > RETRIES ->
                    if
                    :: k == PUT -> printf("EV write %d 1 %d error %d 0 retries -1\n", c, tok, WVAL)
                    :: else -> printf("EV delete %d 1 %d error -1 0 retries -1\n", c, tok)
                    fi;
                    goto next
                :: else
                fi
            };
            goto again
        :: atomic {
            presp[s] == 0 && timeouts < MAXT ->
                timeouts++;
                pwait[s] = false;
                if
                :: k == PUT -> printf("EV write %d 1 %d error %d 0 timeout -1\n", c, tok, WVAL)
                :: else -> printf("EV delete %d 1 %d error -1 0 timeout -1\n", c, tok)
                fi
            }
        fi;
next:
        atomic { k = 0; ce = 0; ct = 0; obj = false; tries = 0; s = 0; v = 0; i = 0; re = 0 }
    od;
    atomic { tok = 0; it = 0; done++ }
}

init {
    byte c;
    atomic {
        c = 0;
        do
        :: c < SLOTS -> run Courier(c); c++
        :: else -> break
        od;
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

ltl store_order { [] ((bad & 1) == 0) }
ltl no_recreate { [] ((bad & 2) == 0) }
ltl acked_durable { [] (done < K || counter >= acked) }
ltl increments { [] (done < K || value >= incs) }
