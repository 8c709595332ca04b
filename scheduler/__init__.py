"""lnet scheduler: which chain of depots a transfer uses, and when to move to another.

Pure code: no trio, no httpx, no clock. Time comes in as ``now`` (Unix seconds, so that a saved memory means
the same to the next process), measurements come in as events, decisions go out as frozen dataclasses. The
transfer engine owns the sockets and carries the decisions out.

Theory of operation
===================

The seed (Labissoniere & Roche, *Adaptively Improving Long Distance Network Transfers with
Logistics*) models the network as a directed graph: the source, the destination
and every depot are vertices, every ordered pair is an edge weighted by the throughput measured on it. A path's
predicted throughput is its smallest edge (the pipeline runs at its slowest hop), so the best path is the one
whose smallest edge is largest: the max-min, or widest, path. Its routine is Dijkstra with ``min`` in place of
``+`` and ``max`` in place of ``min``. Its main loop is::

    while the transfer is not complete:
        new_path = widest_path(src, dst)         # unknown edges count as infinitely fast
        if new_path != cur_path: stop cur_path; start new_path
        sleep(t)                                 # let the transfer ramp up
        update_weights()                         # from what the hops measured
        age_weights()                            # raise stale weights by a percentage, a bounded number per round

Unknown edges being infinite is the cold start: every untried edge looks best, so the loop tries them, learns
and settles. A warm start begins from weights remembered from earlier transfers. Aging gives a once
mis-measured edge another chance.

Where lnet departs from the seed, and why
-----------------------------------------
1. Heap, not an O(V^2) scan (``widest_path``): a full mesh of 1000 depots answers in a fraction of a second.
   Ties in bottleneck go to the path with fewer hops (fewer depots to hold the data, fewer copies), then to the
   vertex order given, so runs are reproducible. That takes a second pass (breadth-first over edges at least
   as wide as the best bottleneck); one Dijkstra keyed on (width, hops) gets the hop count wrong.
2. Estimates are smoothed (``EdgeMemory.observe``): an exponential average weighted by the seconds a sample
   covers (time constant ``smoothing_s``), so block size does not change how fast the memory follows a change.
   Samples taken in the first ``warmup_s`` after an edge joins the path are not learnt from, and no attempt is
   judged before ``min_attempt_s``: TCP is still opening its window, and the seed's sleep(t) had the same aim.
   The loop looks every ``reevaluate_s``, and also the moment an attempt has run ``min_attempt_s``: a path
   moved to between looks (an early move on a probe's news) is judged when it may be, not at the next look.
   One exception, with probes (8): a path of measured edges predicted ``early_gain`` (20%) faster than the
   current one is moved to at the next re-evaluation, before ``min_attempt_s``. A cold start steps through a
   one-depot path while the probes measure the chain's middle edge (on the emulated ``window`` and ``lossy``
   topologies that step cost 10 s of each cold start and its 30-s target); the lesser path has nothing left
   to prove. A path tried on ceilings (9) runs its whole attempt, and no move is made onto an unknown edge or
   a ceiling, so exploration is never hurried. A set of paths (12), newcomers on trial or not, is left early
   only for a path new to it predicted ``early_gain`` faster than all the set carries: no trial's outcome can
   make the set the better one then (a cold start whose scout through a decoy depot sat silent on trial held
   its first path, a fifth of the chain's rate, 5 s more while the chain was measured). Twice the hysteresis,
   so that noise between near-equal paths waits for the full attempt as before. The gain is over the better
   of what the current path measures and what it was chosen for: with the default in-flight rule a new
   path's hops are still deepening when first judged, its own samples read low, and an early move back to
   the path it replaced made cold starts on the emulated Abilene flap every 5 s. The cold start's first
   path, chosen on nothing, is judged by what it measures. A probe that finishes between re-evaluations is
   news: the early-move rule is applied at the next tick, not at the next re-evaluation (a chain's last probe
   that reported half a second after one cost the emulated ``lossy`` cold start 5 s more on the direct path).
   Whether a sample fell in the warm-up is judged by when its first copy began (``Measurement.began``), not
   by its seconds: the seconds of copies side by side add up, so ``at - seconds`` dated every sample of a slow
   hop (long copies, two at once) into the warm-up for its first 10-15 s, and only its fast ones, the first
   burst of a lossy link, were learnt (on the emulated ``lossy`` topology the direct path stayed at 15
   Mbit/s in the scheduler's eyes for 15 s while it ran at 3). With probes, a hop of the set with nothing
   learnt yet is weighed at what its copies carried, warm-up ones included, when the set is compared with
   another path (``carried``; not remembered): a slow hop's copies outlast the warm-up, and counted as
   unknown, infinitely fast, a 3 Mbit/s first path kept a testbed transfer 28 s from a 43 Mbit/s chain.
3. Hysteresis: a path replaces the current one only when predicted ``hysteresis`` faster (an unexplored path is
   infinitely fast and always is), so measurement noise does not flap the transfer between near-equal paths.
4. Starvation guard (left open by the seed): at most ``max_explorations`` attempts may use a path with unknown
   edges. Once they are spent, unknown edges are ignored and the loop settles on the widest path of measured
   edges, the direct path if nothing is measured end to end.
5. Aging as the seed has it (stale weights raised by ``age_percent``, oldest first, ``age_max_per_round`` per
   re-evaluation), but the raise is kept apart from the measured estimate (``EdgeEstimate.boost``) until the
   next measurement, so that a caller can tell a second chance from a measurement (see 8).
   Failures: a failed hop's weight is 0 until aging; aging a failed edge hands back its estimate from before the
   failure, raised by the aging percentage, or makes it unknown again if it had none. A failed depot fails
   every edge through it and yields ``DropDepot``. A failure on the current path is acted on at the next
   ``tick``, not at the next re-evaluation.
6. Wrong memory: a warm start trusts the memory only until this transfer measures a remembered edge off by more
   than ``memory_mismatch``; from then on every remembered estimate this transfer has not itself confirmed
   counts as unknown. So a warm start with wrong memory costs at most one wasted attempt more than a cold start,
   where the seed could need as many attempts as a cold start on top of its mistakes, or age its way out.
7. Shared depots: a measurement is the throughput *this transfer* got on the edge, which is its share when
   other transfers use the same edge. That is what it can expect from the edge while they run, and it makes
   concurrent transfers spread over disjoint chains instead of all piling onto the one with the most raw
   capacity. Depots' ``/v1/status`` links are read the same way: each push's bytes over its seconds, a per-flow
   rate. Aging lets a transfer find the capacity again once others leave.
8. Probes (``probes_per_round``, on by default): the seed explores by moving the whole transfer onto a path with
   unknown edges, so a cold start on V vertices costs at least V attempts at a fraction of the best throughput
   (13 on the seed's 8). lnet keeps the transfer on the best *measured* path and keeps a few probes running
   beside it (``probes_per_round`` at once, four by default), each on one unknown or aged edge of the optimistic
   paths (unknown = the round-trip guess of 10, aged = raised) that could beat that path by the hysteresis
   margin, a new one at the first tick after one ends (``ProbeDone``). The engine owns a probe's warm-up. An
   engine that never answers a probe is noticed after ``probe_s`` and the loop falls back to the seed's way.
   A warm start (its first path chosen from measured edges) starts its probes once every hop of its set has
   reported, or ``warm_probes_after_s`` (3 s) after the start, whichever is first: its first copies are on their
   way, and a probe beside them takes its share of whatever link they cross while nothing has arrived yet. A
   cold start probes from its first second (docs/decisions/0014).
9. Comparable measurements. Every weight the loop compares means one thing: the throughput this
   transfer can expect on the edge with its own block size and ``streams`` blocks in flight per hop. How TCP
   behaves on these paths decides how to get it:

   - A stream is held back by its window (window / RTT), by loss (about MSS / (RTT sqrt(p))), or by the
     narrowest link it crosses. The first two are limits *per stream*: n streams get n times as much, until
     the link is full. Streams under their share of a full link keep their rate; the others split what is
     left, the short round trips taking more (on the testbed about in inverse proportion to the round trip:
     ``bench/rtt_sharing.py``, docs/decisions/0023).
   - So a measurement is a *per-stream* rate: bytes over stream-seconds, the sum of the durations of the copies
     that carried them, each timed by whoever moved the data (a depot's own push time: the client's control
     round trip and a copy's wait in its lane are not the edge's). A hop whose n copies fill its link reports
     C / n a stream, one that does not reports its streams' own rate; both mean the same thing, and the
     weight of the edge is ``streams`` x that: exactly C for the edges the transfer runs on, exactly n x
     (window / RTT) for an edge measured with one stream that n streams would not fill, and optimistic where
     they would, until the transfer moves there and measures it at n (one attempt, as a seed exploration).
     Busy-time aggregates (bytes over the time the hop had anything in flight), which lnet used before,
     compared n streams on the path with one on a probe, and every chain looked slower than direct.
   - Slow start dominates a short copy, so a probe copies a block of the transfer's own size, several times
     back to back on one connection, and the engine drops the first (cold) copy.
   - A probe that shares a bottleneck with the transfer sees only what the transfer leaves, and probes beside
     each other see only what the others leave: Abilene's overlay paths all share its backbone. Hence few
     probes at once (``probes_per_round``), never two out of one host or into one host at once (they would
     share that host's access link), and a correction: when a hop of the current path slows by more than
     ``SHARED_DROP`` while a probe runs, the two share a link, and moving the transfer there would free the
     hop's share, so the probe stands for ``(probe + hop) / streams`` a stream.
   - Window-limited hops below their fair share do not slow down, so they do not show the sharing: on the
     emulated Abilene, Denver -> Sunnyvale probed beside the transfer's own streams into Sunnyvale read half
     of what it carries. On a full link such a probe gets at least each of the hop's streams' rate (within
     ``FAIR_SHARE_GAP``); a probe that got that much, on an edge that shares an end with a hop of the set (the
     host's access link, the likeliest shared bottleneck), is a *floor*: its figure is kept, with the
     *ceiling* ``(probe + hop) / streams``, what the edge gives if the two do share and the transfer moves
     there (``EdgeEstimate.ceiling_bps``, kept in the memory file). The loop may try a path that is the widest
     only with ceilings counted (it must beat the measured best by ``HOPE_HYSTERESIS`` times the hysteresis,
     as a first decision too, so a warm start can begin there) as an exploration; the transfer's own samples
     then replace the floors. It must gain over the path it left by the hysteresis; if it does not, or is
     left, ceilings were not shared links on this network and are not tried again in this transfer. So a
     network without shared links costs at most one attempt of ``min_attempt_s``. Measurements come before
     hopes: no path is tried on ceilings while a running probe may still show a measured path wider than it
     (the ways to the probed edge and on from it, over measured edges and the running probes, clear its
     prediction by the hysteresis); the probe ends within seconds, the trial takes ``min_attempt_s`` to judge.
     An unknown edge no probe is measuring does not count: it needs a probe of its own, and counting it
     infinitely fast held the trial back for whole cold starts on the emulated Abilene.
   - With the default in-flight rule the engine chooses each hop's depth (Wu et al.'s pipelining depth, from
     ``min_inflight`` up to ``streams``): a hop stops at the copies that fill it, so a link full at 2 copies reports
     C / 2 a stream, and ``streams`` (16) x that would weigh it at 8 C. The engine therefore tells the loop how many
     copies ran at once (``Measurement.streams``: over each copy's life, the copies streaming beside it, at most the
     hop's depth), and the loop learns that hop's aggregate spread over ``streams``: its weight is what the hop
     carried at the depth it chose, exactly C on a full link. (Until 2026-11-26 the engine said stream-seconds over
     busy seconds per half-second flush; 8-s copies ending in one flush made that 2 to 50 on a hop running 16, and
     the emulated Abilene's direct route, 18.6 Mbit/s pinned, was weighed from 3.4 to 16 from one flush to the next:
     cold starts left it for 4-Mbit/s paths. An average over the flush alone multiplied a copy begun at depth 4 by
     the 13 the hop had grown to: 40 Mbit/s, which discredited a warm start's memory.) A hop that runs fewer copies
     than its depth with none waiting (a transfer's tail, or a hop fed by a slower one) carried only what it was
     given: the engine says so (``Measurement.starved``), and its aggregate is then a floor, learnt only where it
     raises the estimate (a cold start's last seconds had left the direct route remembered at 3.1 Mbit/s, and the
     warm start went elsewhere). A probe (one stream, ``streams=1``) weighs that one stream, a *floor*, with
     ``min_streams`` of them (the fewest copies the engine runs on any hop, lnet-send's 2) as its *ceiling*: a
     window- or loss-limited edge gives at least that many streams' worth wherever the transfer runs it, a
     link-limited one no more than its one stream, and which it is the probe cannot tell. The loop tries a path on
     ceilings once in a transfer, as below; deeper than ``min_streams`` only the transfer's own samples show.
     Per-stream figures times 16 made a warm start on the emulated Abilene choose chains whose hops had filled at
     2-4 copies (4 Mbit/s where direct gave 18.7); a probe's stream times 16 as its weight made every probed path
     look wider than the measured direct route (on the simulated Abilene a cold start moved 6 to 8 times in 120 s);
     and 16 of them as its ceiling made a 3.5 Mbit/s link, whose one stream read 4, a 64 Mbit/s hope: on the testbed
     a warm start tried Atlanta, Washington, Denver, and the blocks it left 16 deep on that link timed out and
     stalled the transfer for 20 s (7.6 Mbit/s where direct gave 18.7). At 2 copies a slow link is no lure, and a
     chain of window-limited hops whose two streams beat the path is still tried (``test_shared_links.py``).
   - The regime changes the answer, not the rule. At a fixed 2 blocks a hop (``--max-inflight 2``, the seed's
     setting) the long direct route is window-limited, and short hops win: on the emulated Abilene the
     four-depot chain fills the Denver-Sunnyvale link at 20 Mbit/s where direct gets 10. With the default
     in-flight rule a hop keeps up to 16 blocks, a window-limited direct route fills the same link, and no
     chain through it can win: the gain then comes only from routing around a narrow or lossy link.
     ``tests/scheduler/test_shared_links.py`` runs both on ``simulator.abilene_shared()``.
10. Exploration that reaches the middle of a chain. With unknown edges infinitely fast and ties to fewer hops,
   exploration walks breadth-first through every two-hop path before it measures an edge that touches neither
   end. lnet orders it with the one thing the engine measures for free, the client's round trip to every
   depot (``rtt_s``): a stream's rate falls with its round trip, and ``rtt(u, v) >= |rtt(src, v) -
   rtt(src, u)|``, so an unknown edge is guessed at ``K / that bound``, ``K`` the largest rate x bound of a
   measured edge. Depots towards the destination look promising, ones behind the source do not, and the
   probes go down the chain first. Before anything is measured there is no ``K``, but the guesses still rank
   the unknown edges among themselves (``K = 1``), so the very first probes already go towards the destination
   instead of in the graph's order (on the emulated Abilene: Atlanta -> Sunnyvale and Kansas City ->
   Indianapolis). The guess only orders probes; the transfer moves on measurements alone. The client's round
   trips bound an edge between two depots from below and no more (two depots at one distance from the client
   look a millisecond apart, however far apart they are), so where the depots timed their round trip to each
   other (``peer_rtt_s``, from their ``/v1/status``), that replaces the bound: in the simulator it took a
   32-depot cold start's median time to 90% of the best path from 54 s to 3 (docs/decisions/0012).
   On the simulated shared Abilene a cold start at 2 streams a hop measures the whole chain and moves onto it
   within about 45 s (one probe at a time); without the guess it had not in 80 s.
   The path-by-path search looks past a path by counting its edges as 0, and so counts an edge being probed:
   that hid every chain through it, and a chain's middle edge waited for the probe of its last edge to end
   (on the emulated ``lossy`` topology, whose slow edges take 8-10 s to probe, the middle edge was measured
   20 s into a cold start). So, with one path, free probe places then go to unknown or aged edges through
   which some way from the source to the destination could still beat the best known path, edges being
   probed counted at their hopes (the widest way to the edge's tail that avoids its head, the edge, the
   widest way on that avoids its tail), widest first, none sharing an end with another probe. An edge that
   waits only for running probes keeps its ends: they end before any probe started now could, and a
   narrower candidate started at one of its ends would make it wait ``probe_s`` more (on ``lossy`` the
   chain's last two edges waited for two such probes, 8 s). Of paths as wide, the next probed is the one whose
   narrowest guess is widest, then the one with the fewest guessed edges, then the fewest hops: on a backbone
   every way into the destination ties at one of a few last edges, and the graph's order chose among them
   (on the emulated Abilene the chain's last unknown edge was probed at 30-40 s, now at 14-18 s). In the
   simulator (``bench/scheduler.py``) cold starts reach 90% of the best path sooner: Abilene 26 s (36), shared
   Abilene 35.5 s (never), random 16-vertex meshes 63.5 s median (95.5); with the last two rules (2026-11-26)
   Abilene 32.5 s (it has no round trips: ties among unknown edges fell to the graph's order, which probed Atlanta
   <-> Indianapolis first by luck), shared Abilene 22 s, random 8/16/32 19/65.5/265.5 s (19/65.5/276), and the 600-s
   shared-Abilene cold start left the chain at 525 s after an aged edge's probe (the warm start then began off it:
   its first 90% at 560 s, against 0.5 s before, and 0.5 s again at `943328c`; before, the warm start made such
   a move at 310 s instead, after its first 90%). Not taken: a probe round
   chosen by maximum matching (as many probes at once as the hosts allow) measures a four-vertex graph's
   three-hop chain in the first round, but then puts a cold start on that chain before the as-wide two-hop
   path beside it is known, against rule 1's ties. Letting an edge that waits for a probe at one of its ends
   hold that end against less promising probes, alone, made the simulator's cold starts slower (Abilene 31 s,
   shared Abilene never, measured before this session); with the ties broken by the guesses it is the rule above.
11. Depots' weather: a depot publishes what its own pushes measured, per peer, in the same per-stream unit, with the
   age and the number of streams (``/v1/status`` ``links``); a first transfer on a new client starts warm from it
   (``EdgeMemory.seed_from_links``), and the mismatch rule (6) guards against stale weather. With the default
   in-flight rule a link is learnt as 9 says of the transfer's hops and probes: the pushes that ran at once, spread
   over ``streams``, a floor with ``min_streams``' worth as its ceiling (as one push's rate x 16, a probe's push
   over a 3.5 Mbit/s link weighed 43 Mbit/s, and a warm start began there).
12. Path sets (``max_paths`` > 1; with 1 nothing below happens). The seed runs one path; where the
   overlay has routes that do not share a physical bottleneck, a transfer striped over several moves at close
   to the sum of their rates (the MDTP paper does the same with replicas; the engine shares blocks among the
   paths by their rates so that all finish together). The model: a set of overlay paths that share no edge,
   each running at its narrowest edge as a single path does, the set at the sum of its paths.

   - The set: the primary is the path the single-path rules choose (1-11, hysteresis included, unchanged), then
     further paths join (``_paths.extend_set``), greedily: the widest path of *measured* edges once every edge
     of the set (and of banned paths, below) is taken out of the graph, while it is predicted to add at least
     ``path_margin`` of the growing set's predicted total, up to ``max_paths``. Every path so predicted joins at
     one evaluation, as one trial, and a warm start's first decision already carries every path its memory
     predicts: one path per ten-second trial made a warm start on three disjoint routes reach their sum only
     after 20-25 s (0.82 of the sum over a testbed transfer; in the simulator 0.63 of it over the first 20 s,
     against 1.00 all at once). Unknown edges never join a set (exploration stays the primary's and the
     probes' job); probes may target the unknown or aged edges of paths that could join.
   - Why edge-disjoint: a shared overlay edge would carry two paths' blocks on one TCP connection pool, so
     the two would not add there, and its measurements would belong to neither; disjoint, every hop's
     measurement belongs to one path and means what it did. Paths may meet at a depot (it copies each block
     once whichever path it is on). Greedy (widest, then the widest of what is left) rather than a max-flow
     decomposition: it keeps the primary the single-path rules' choice, and a flow's split is only as good as
     the independence of the edges it adds up, which is what the overlay lacks.
   - Where the model is optimistic: overlay edges are not links. Two edge-disjoint overlay paths may cross one
     physical link (a shared bottleneck: every route out of a site's access link, or the direct route riding
     the same backbone as a chain), and then the second adds nothing: the two split the link. The weights
     cannot show it (each was measured alone or as a probe, and the probe correction of 9 estimates what the
     edge gives *instead of* the path, not *beside* it). So sharing is learnt: paths join on trial, with the
     set's measured total just before (the baseline); after ``min_attempt_s`` each newcomer must have added
     half the margin of the baseline, and the others must not have lost more than half of what it carries (a
     total that grew only because the set was held back when it joined, by a probe or by the trial before, is
     no gain: the newcomer took its rate from the set), else it shared a bottleneck: it leaves (``"drop"``)
     and its edges are banned from further paths until the path is predicted more than the margin wider than
     when it left, or an edge of it is forgotten.
     Aging raises it (so a bottleneck that clears is found again, at the cost of one trial per aging period);
     a lower figure never lifts a ban, and for ``min_attempt_s`` after the drop the figures of the path's own
     last blocks, still in flight when it left, only raise the width it is held to. A path whose measured rate falls
     below half the margin of the others' leaves the same way. Half, not the whole margin: a path admitted near
     the margin would otherwise leave and come back with the noise. The model is optimistic too where paths
     share a depot whose disk or NIC is the limit, and where a hop upstream of a path's bottleneck takes more
     of a shared link than the path delivers (the simulator lets it; a real hop is held back by its window).
   - Judged together: newcomers that joined at once are judged each on its own part (``_paths.trial_keeps``),
     because a rule on the group's total lets one that adds nothing ride on one that adds much (a primary of 100
     split with a newcomer, 50 and 50, beside another newcomer of 60 on its own route: the total grew 60%). What the
     others lost is shared among the newcomers by how far each fell short of its own prediction: one crossing a
     bottleneck of the set gets only its share there, one on a route of its own runs as predicted (by their rates
     when none fell short; one that never reported took nothing and adds nothing), and first among those the round
     trips place on the others' links, where some are and some are not (17). Each newcomer must add half the
     margin net of its share, and its share may be at most half its rate; with one newcomer that is the rule above
     exactly. Those kept must still pass together (half the margin each, the others counted as regaining what the
     leaving ones carry, up to what they lost), else the one adding least leaves too: that catches newcomers
     predicted low, from a figure measured beside the set, which fall short of nothing. A warm start's baseline is
     only the memory's figure for the primary: a memory optimistic for every path by nearly the mismatch bound
     (6) looks the same as paths that all share one bottleneck, and its newcomers leave, banned until aging.
     Leaving them unbanned, to be tried again on a measured total, cost every warm start through a shared
     bottleneck a second trial.
   - Remembered: a ban is also kept in the memory (``EdgeMemory.note_overlap``: the path, the primary it did not
     add beside, the width it is held to, when), and a later transfer whose primary is that path keeps it out
     from its first decision, under the same rule (lifted when predicted wider by the margin, and then
     forgotten in the memory too), for ``age_after_s``, the time after which a weight gets its second chance:
     then aging forgets the record and the path is tried again. Without it each warm start paid the trial the
     transfer before it had already paid: on the testbed's dumbbell a path crossing the bottleneck twice held
     the set to half its rate for the trial's 10 s, 8% of a 45-s transfer. A trial's verdict is a measurement
     like an edge's, and remembered like one.
   - Stability: any change of the set (primary switch, join, drop) starts a new period in which nothing but a
     failure is judged for ``min_attempt_s``, so each change is measured before the next, one trial (of one
     or several newcomers) at a time, and the primary's estimates, depressed by a newcomer that shared its
     bottleneck, are not read as a reason to switch. A primary switch to an extra of the set swaps the two
     (they ran together already), and is no change of the set: the period is not restarted. A move onto a
     path new to the set is made only when the set built greedily from it is predicted ``hysteresis`` above
     the current set's total (a slightly wider primary is no reason to stop a second path), and it keeps the
     paths of that set that run now, and newcomers still on trial beside them: the others leave unbanned, the
     path joins beside the kept ones on trial (``reason="join"``), and the single-path rules make it the
     primary once it has shown what it carries. (Ending every path and joining them again cost each its fill
     and a trial; with no path of the set to keep, the move is still a switch to the path alone.)
   - A full set (``max_paths``) trades its narrowest extra for a path new to it when the set without that
     extra, extended greedily again, is predicted ``path_margin`` above the set's measured total: the extra
     leaves unbanned and the newcomer joins on trial. Else a slow path that joined while a wider one was
     still unmeasured would hold its place for the whole transfer.
   - Failures: a failed depot fails every edge through it (5), so every path of the set through it leaves at
     the next ``tick`` (``DropDepot`` carries the new set); if the primary was among them, the widest path
     left, often an extra, becomes the primary and carries on without a restart.
13. Deep probes. A one-stream probe cannot tell an edge held back by its streams' own window or loss
   (16 streams get 16 times as much) from a narrow link (they get no more); rule 9 credits it with
   ``min_streams`` of its stream at most. On random scenarios (``scenarios.py``, kind ``detour``) that left
   detours of window-limited hops unexplored for whole transfers: a hop's one stream read 12 Mbit/s beside a
   direct path at 16 x 6.6 = 105, while the detour carried 198 at 16 (0.56 of the best path at the 10th
   percentile, warm and cold). So an edge known only from a one-stream probe, whose path would beat the best
   measured path by the hysteresis were the edge to carry ``streams`` of that stream, is probed again, *deep*
   (``Keep.deep``): the engine runs its copies 1, 2, 4, ... at once while a level carries ``DEPTH_GAIN`` (1.25)
   times the one before, and reports the level it stopped at as ``Measurement.streams``; that figure is the
   edge's own, with no ceiling. Each edge once a transfer; deep probes only once no unknown or aged edge is worth
   a probe, and never at an end where a deep probe slowed a hop of the set (that end's access link is full: a
   deep probe there takes its rate from the transfer). On the tuning seed (40), deep probes taken among the
   ordinary ones and with no such end rule delayed cold starts of every kind (16 depots: 53.5 s to 90% where
   one-stream probes took 31) and cost the ``shared`` kind (warm 10th percentile 0.87 against 0.96); with the
   end rule, 0.94; deferred as well, 0.96, and 31 s. ``SchedulerConfig.deep_probes=False`` runs
   one stream a probe, to compare (``bench/scheduler.py --no-deep-probes``).
14. Cold scouts. Throughput is the expensive measurement, round trips are almost free: the client
   times its round trip to every depot before the first decision (``rtt_s``), and rule 10's priors rank unknown
   edges by them. A cold start with ``max_paths`` > 1 (its first path has an edge it knows nothing of) runs
   that path alone until every hop of it has reported, or ``scout_after_s`` (3 s) has passed, whichever is first,
   then, beside it, up to ``max_paths`` - 2 paths through
   one depot each, the widest by those guesses (``PathSet.scout``; one place stays free for what measurement finds):
   the transfer's own blocks measure them, at its depth, on every hop at once, where a probe measures one edge
   with one stream. They join on one trial whose baseline is the first path alone, so one that takes its rate
   from that path leaves, banned; one that adds less than the margin later leaves by rule 12 (``PathSet.drop_idle``);
   at the end the relay's end game takes the blocks a slow one holds. ``SchedulerConfig.cold_scouts=False``
   starts on one path, to compare (``bench/scheduler.py --no-cold-scouts``). The deadline: a hop reports when a
   copy ends, so a slow first path (4 MiB copies two at a time at 3 Mbit/s: 22 s) held its scouts back for as
   long, and nothing else could replace it meanwhile (a path with an unknown hop counts as infinitely fast). On
   the testbed a cold start ran such a direct path alone for 17.6 s. A first path that has not reported by the
   deadline counts as carrying nothing in its scouts' trial and in ``drop_idle`` (``shown_rate``), so a scout
   that carries anything stays until the usual rules judge it (docs/decisions/0009).
15. Candidates. Every rule above looks at the full mesh over the vertices, and exploration repeats a widest path
   once per probe it places: over 300 depots (a directory's overlay, 90,000 edges) the first decision took two
   minutes of the client's CPU. A transfer explores a few paths of one to four hops anyway, so the loop keeps at
   most ``SchedulerConfig.max_depots`` depots (32, the largest overlay the random scenarios' targets were met on),
   the destination always (``_candidates.candidates``): the depots the memory knows a measured way through, widest
   first, in at most three quarters of the places; then the depots the round trips place best for a one-depot
   path (the longer of its two legs as rule 10 bounds them, shortest first); then any remembered depot left.
   Those left out are not asked for anything more; a depot that joins the directory during the transfer is added
   as before. ``max_depots=None`` keeps every vertex (``bench/scheduler.py --max-depots 0``, to compare).
16. A path that cannot fill in time. A path delivers nothing until its first copies have crossed every hop (a
   depot passes a block on once it holds all of it). With the set at rate R, L bytes left and a newcomer of rate w
   whose first block comes after F, the transfer ends at (L + wF) / (R + w) with it and at L / R without it:
   sooner exactly when F < L / R, whatever w is. So, given the block size (``SchedulerConfig.block_bytes``) and
   the bytes left (``Progress``, told by the engine before each ``tick``), a path new to the set is taken (a move,
   early or not, a join, a trade) only when its fill (``_paths.fill_s``: ``first_depth`` copies a hop sharing the
   hop's predicted rate, one hop after the other) is shorter than what is left over what the set carries now.
   A failure's move is always made. Near the end of a short transfer the loop no longer moves onto, or joins, a
   path whose first block would come after the last (docs/decisions/0020).
17. Which newcomer took the rate. A depot on the route between two others adds nothing to its round trip:
   ``rtt(u, w) + rtt(w, v)`` is ``rtt(u, v)``, give or take the hosts' own time (1.5-3.3 ms a round trip on the
   testbed), where a depot off the route adds its detour. So the round trips the loop already has (the client's to
   every depot, and the depots' to their peers, rule 10) say which vertices a hop passes, in order
   (``_routes.RouteGuess``: within 4 ms + 2% of the hop's own), and two hops that pass two of the same vertices
   in the same order cross the links between them. When newcomers judged together (12) took rate from the paths
   that were there, and the round trips place some of them on those paths' links and some not, the loss is
   theirs that cross (``_paths.taken_shares``), shared among them as before; a newcomer on a route of its own
   took nothing, however far it fell short of its own prediction. Only the trial's measurement says that rate was
   taken: where paths share links the round trips tell, but not whether those links are full, and a link one
   path's streams do not fill is shared at no cost. Weighing a path that would join at its share of the set's
   links on the guess alone was tried and not kept (docs/decisions/0021). Without the depots' round trips nothing
   is guessed; ``SchedulerConfig.route_blame=False`` shares a loss by the shortfalls alone (docs/decisions/0022).
"""

from ._loop import (
    Decision,
    DepotFailure,
    DropDepot,
    Event,
    HopFailure,
    Keep,
    Measurement,
    Path,
    PathAttempt,
    PathScheduler,
    ProbeDone,
    Progress,
    SchedulerConfig,
    Switch,
    SwitchReason,
)
from ._memory import Edge, EdgeEstimate, EdgeMemory, Overlap
from ._paths import adds_enough, extra_path, keeps_adding, path_set, set_total
from ._widest import THROUGHPUT, NoPathError, edges_of, path_throughput, widest_path

__all__ = [
    "THROUGHPUT",
    "Decision",
    "DepotFailure",
    "DropDepot",
    "Edge",
    "EdgeEstimate",
    "EdgeMemory",
    "Event",
    "HopFailure",
    "Keep",
    "Measurement",
    "NoPathError",
    "Overlap",
    "Path",
    "PathAttempt",
    "PathScheduler",
    "ProbeDone",
    "Progress",
    "SchedulerConfig",
    "Switch",
    "SwitchReason",
    "adds_enough",
    "edges_of",
    "extra_path",
    "keeps_adding",
    "path_set",
    "path_throughput",
    "set_total",
    "widest_path",
]
