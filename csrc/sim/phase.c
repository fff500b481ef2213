/* One phase of the flow simulator: the reference event loop, in C (see phase.h). */
#include "phase.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

struct sim {
	int64_t n, narcs;
	const int64_t *indptr, *arc;
	const double *weight, *capacity;
	double rtol;

	/* arcs -> flows (ascending), the transpose of the incidence; arc a's
	 * list is by_arc_ptr[a] .. by_arc_end[a]-1, compacted as flows finish */
	int64_t *by_arc_ptr, *by_arc_end, *by_arc_flow;
	double *by_arc_weight;

	/* flows */
	double *remaining, *rate, *to_go;
	int64_t *stage;              /* the filling stage each live flow froze at, -1: not yet */
	unsigned char *live, *unfrozen, *gone;
	int64_t *active, nactive;    /* transmitting, ascending */
	int64_t *pending, npending;  /* released, paying their latency */
	int64_t *scratch, *redo;

	/* arcs */
	double *load, *room, *arc_rate, *share;
	int64_t *used, *saturated;
	unsigned char *in_used, *dirty;
	int64_t *dirty_list, ndirty;
	int64_t *ngone;              /* finished flows still in each arc's list */
	/* hist[a][j]: arc a's room before stage j, for j <= hist_top[a]: valid
	 * until a flow on a leaves (the loads of every earlier stage change) */
	double **hist;
	int64_t *hist_top, *hist_cap;

	/* the filling's stages: increment and level after each */
	double *delta, *level, *count;
	int64_t nstages, resume;
};

static void say(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void say(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static void *table(size_t count, size_t size, int *failed)
{
	void *p = calloc(count ? count : 1, size);

	if (!p)
		*failed = 1;
	return p;
}

static void release_sim(struct sim *s)
{
	void *all[] = {
		s->by_arc_ptr, s->by_arc_end, s->by_arc_flow, s->gone, s->by_arc_weight,
		s->remaining, s->rate, s->to_go, s->stage, s->live, s->unfrozen, s->active,
		s->pending, s->scratch,
		s->redo, s->load, s->room, s->arc_rate, s->share, s->used, s->saturated,
		s->in_used, s->dirty, s->dirty_list, s->delta, s->level, s->count,
		s->ngone, s->hist_top, s->hist_cap,
	};

	if (s->hist)
		for (int64_t a = 0; a < s->narcs; a++)
			free(s->hist[a]);
	free(s->hist);

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		free(all[i]);
}

static int alloc_sim(struct sim *s, int64_t nnz)
{
	size_t n = (size_t)s->n, a = (size_t)s->narcs, e = (size_t)nnz;
	int failed = 0;

	s->by_arc_ptr = table(a + 1, sizeof(int64_t), &failed);
	s->by_arc_end = table(a, sizeof(int64_t), &failed);
	s->by_arc_flow = table(e, sizeof(int64_t), &failed);
	s->gone = table(n, 1, &failed);
	s->by_arc_weight = table(e, sizeof(double), &failed);
	s->remaining = table(n, sizeof(double), &failed);
	s->rate = table(n, sizeof(double), &failed);
	s->to_go = table(n, sizeof(double), &failed);
	s->stage = table(n, sizeof(int64_t), &failed);
	s->live = table(n, 1, &failed);
	s->unfrozen = table(n, 1, &failed);
	s->active = table(n, sizeof(int64_t), &failed);
	s->pending = table(n, sizeof(int64_t), &failed);
	s->scratch = table(n, sizeof(int64_t), &failed);
	s->redo = table(n, sizeof(int64_t), &failed);
	s->load = table(a, sizeof(double), &failed);
	s->room = table(a, sizeof(double), &failed);
	s->arc_rate = table(a, sizeof(double), &failed);
	s->share = table(a, sizeof(double), &failed);
	s->used = table(a, sizeof(int64_t), &failed);
	s->saturated = table(a, sizeof(int64_t), &failed);
	s->in_used = table(a, 1, &failed);
	s->dirty = table(a, 1, &failed);
	s->dirty_list = table(a, sizeof(int64_t), &failed);
	s->delta = table(a + 1, sizeof(double), &failed);
	s->level = table(a + 1, sizeof(double), &failed);
	s->count = table(a + 1, sizeof(double), &failed);
	s->ngone = table(a, sizeof(int64_t), &failed);
	s->hist = table(a, sizeof(double *), &failed);
	s->hist_top = table(a, sizeof(int64_t), &failed);
	s->hist_cap = table(a, sizeof(int64_t), &failed);
	for (size_t i = 0; !failed && i < a; i++)
		s->hist_top[i] = -1;
	return failed ? -1 : 0;
}

static void build_by_arc(struct sim *s)
{
	int64_t *ptr = s->by_arc_ptr;

	for (int64_t e = 0; e < s->indptr[s->n]; e++)
		ptr[s->arc[e] + 1]++;
	for (int64_t a = 0; a < s->narcs; a++)
		ptr[a + 1] += ptr[a];
	/* ptr[a] serves as arc a's cursor, then is shifted back */
	for (int64_t f = 0; f < s->n; f++) {
		for (int64_t e = s->indptr[f]; e < s->indptr[f + 1]; e++) {
			int64_t a = s->arc[e];
			int64_t k = ptr[a]++;

			s->by_arc_flow[k] = f;
			s->by_arc_weight[k] = s->weight[e];
		}
	}
	for (int64_t a = s->narcs; a > 0; a--)
		ptr[a] = ptr[a - 1];
	ptr[0] = 0;
	for (int64_t a = 0; a < s->narcs; a++)
		s->by_arc_end[a] = ptr[a + 1];
}

/* Drop the finished flows from arc a's list (stable: the order stays ascending). */
static void compact(struct sim *s, int64_t a)
{
	int64_t kept = s->by_arc_ptr[a];

	if (!s->ngone[a])
		return;
	s->ngone[a] = 0;
	for (int64_t k = s->by_arc_ptr[a]; k < s->by_arc_end[a]; k++) {
		if (s->gone[s->by_arc_flow[k]])
			continue;
		s->by_arc_flow[kept] = s->by_arc_flow[k];
		s->by_arc_weight[kept++] = s->by_arc_weight[k];
	}
	s->by_arc_end[a] = kept;
}

/* Keep arc a's room before stage j; 0 when out of memory. */
static int remember(struct sim *s, int64_t a, int64_t j, double room)
{
	if (j >= s->hist_cap[a]) {
		int64_t cap = s->hist_cap[a] ? 2 * s->hist_cap[a] : 16;
		double *grown;

		while (cap <= j)
			cap *= 2;
		grown = realloc(s->hist[a], (size_t)cap * sizeof(double));
		if (!grown)
			return 0;
		s->hist[a] = grown;
		s->hist_cap[a] = cap;
	}
	s->hist[a][j] = room;
	s->hist_top[a] = j;
	return 1;
}

static void mark_dirty(struct sim *s, int64_t f)
{
	for (int64_t e = s->indptr[f]; e < s->indptr[f + 1]; e++) {
		int64_t a = s->arc[e];

		if (!s->dirty[a]) {
			s->dirty[a] = 1;
			s->dirty_list[s->ndirty++] = a;
		}
	}
}

/* Filling.leave, for a flow that finished: the filling resumes at the first
 * stage it froze at; it leaves the arcs' lists at their next compaction. */
static void leave(struct sim *s, int64_t f)
{
	s->live[f] = 0;
	s->gone[f] = 1;
	s->rate[f] = INFINITY;
	if (s->stage[f] < s->resume)
		s->resume = s->stage[f];
	mark_dirty(s, f);
	for (int64_t e = s->indptr[f]; e < s->indptr[f + 1]; e++) {
		s->hist_top[s->arc[e]] = -1;
		s->ngone[s->arc[e]]++;
	}
}

/* Filling.arrive: a new flow refills from stage 0. */
static void arrive(struct sim *s, int64_t f)
{
	s->live[f] = 1;
	s->stage[f] = -1;
	s->resume = 0;
	mark_dirty(s, f);
}

/* Filling._replay for one arc: its room before stage `from` of a filling
 * without the flows that left, subtracting stage by stage as the filling does.
 * Kept from the fillings before while no flow on the arc left; recomputed (and
 * kept) otherwise.  Returns -1 when out of memory. */
static int replay(struct sim *s, int64_t a, int64_t from, double *out)
{
	double *count = s->count;
	double room = s->capacity[a], load = 0.0;

	if (s->hist_top[a] >= from) {
		*out = s->hist[a][from];
		return 0;
	}
	for (int64_t j = 0; j < from; j++)
		count[j] = 0.0;
	compact(s, a);
	for (int64_t k = s->by_arc_ptr[a]; k < s->by_arc_end[a]; k++) {
		int64_t f = s->by_arc_flow[k];
		int64_t last;

		if (!s->live[f] || s->stage[f] < 0)
			continue;
		last = s->stage[f] < from - 1 ? s->stage[f] : from - 1;
		count[last] += s->by_arc_weight[k];
	}
	/* the load of stage j is the weight of the flows unfrozen through j: a
	 * suffix sum (integers: exact in any order) */
	for (int64_t j = from - 1; j >= 0; j--) {
		load += count[j];
		count[j] = load;
	}
	for (int64_t j = 0; j < from; j++) {
		if (!remember(s, a, j, room))
			return -1;
		room -= s->delta[j] * count[j];
	}
	*out = room;
	return 0;
}

/* Filling.refill: the max-min rates of the flows whose rates may have changed. */
static int refill(struct sim *s)
{
	int64_t from = s->resume < s->nstages ? s->resume : s->nstages;
	int64_t nredo = 0, nused = 0, st;
	double level;

	if (from < 0)
		from = 0;
	s->resume = INT64_MAX;
	for (int64_t i = 0; i < s->nactive; i++) {
		int64_t f = s->active[i];

		if (s->stage[f] >= from || s->stage[f] < 0)
			s->redo[nredo++] = f;
	}
	if (!nredo)
		return 0;
	for (int64_t i = 0; i < nredo; i++) {
		int64_t f = s->redo[i];

		s->unfrozen[f] = 1;
		mark_dirty(s, f);
		for (int64_t e = s->indptr[f]; e < s->indptr[f + 1]; e++) {
			int64_t a = s->arc[e];

			if (!s->in_used[a]) {
				s->in_used[a] = 1;
				s->load[a] = 0.0;
				s->used[nused++] = a;
			}
			s->load[a] += s->weight[e];
		}
	}
	for (int64_t i = 0; i < nused; i++) {
		int64_t a = s->used[i];

		if (!from)
			s->room[a] = s->capacity[a];
		else if (replay(s, a, from, &s->room[a]))
			return -1;
	}
	st = from;
	level = from > 0 ? s->level[from - 1] : 0.0;
	while (nused) {
		double delta = INFINITY, limit;
		int64_t nsat = 0, kept = 0;

		for (int64_t i = 0; i < nused; i++) {
			int64_t a = s->used[i];
			double room = s->room[a] > 0.0 ? s->room[a] : 0.0;

			if (!remember(s, a, st, s->room[a]))
				return -1;
			s->share[i] = room / s->load[a];
			if (s->share[i] < delta)
				delta = s->share[i];
		}
		limit = delta * (1.0 + s->rtol);
		for (int64_t i = 0; i < nused; i++) {
			int64_t a = s->used[i];

			s->room[a] -= delta * s->load[a];
			if (s->share[i] <= limit) {
				s->room[a] = 0.0;
				s->saturated[nsat++] = a;
			}
		}
		level = level + delta;
		s->delta[st] = delta;
		s->level[st] = level;
		for (int64_t i = 0; i < nsat; i++) {
			int64_t a = s->saturated[i];

			for (int64_t k = s->by_arc_ptr[a]; k < s->by_arc_end[a]; k++) {
				int64_t f = s->by_arc_flow[k];

				if (!s->unfrozen[f])
					continue;
				s->unfrozen[f] = 0;
				s->rate[f] = level;
				s->stage[f] = st;
				for (int64_t e = s->indptr[f]; e < s->indptr[f + 1]; e++)
					s->load[s->arc[e]] -= s->weight[e];
			}
		}
		st++;
		for (int64_t i = 0; i < nused; i++) {
			int64_t a = s->used[i];

			if (s->load[a] > 0.0)
				s->used[kept++] = a;
			else
				s->in_used[a] = 0;
		}
		nused = kept;
	}
	for (int64_t i = 0; i < nredo; i++)
		s->unfrozen[s->redo[i]] = 0;
	s->nstages = st;
	return 0;
}

/* Each changed arc's rate, summed over its live flows in ascending order
 * (numpy's bincount adds an arc's entries in that order). */
static void arc_rates(struct sim *s)
{
	for (int64_t i = 0; i < s->ndirty; i++) {
		int64_t a = s->dirty_list[i];
		double sum = 0.0;

		compact(s, a);
		for (int64_t k = s->by_arc_ptr[a]; k < s->by_arc_end[a]; k++) {
			int64_t f = s->by_arc_flow[k];

			if (s->live[f])
				sum += s->by_arc_weight[k] * s->rate[f];
		}
		s->arc_rate[a] = sum;
		s->dirty[a] = 0;
	}
	s->ndirty = 0;
}

static int check(const struct sim *s, const double *size_bits, const double *latency,
		 char *err, size_t errlen)
{
	if (s->n < 0 || s->narcs < 0 || s->indptr[0] != 0) {
		say(err, errlen, "bad sizes: %lld flows, %lld arcs", (long long)s->n,
		    (long long)s->narcs);
		return -1;
	}
	for (int64_t f = 0; f < s->n; f++) {
		if (s->indptr[f + 1] < s->indptr[f]) {
			say(err, errlen, "flow %lld: decreasing row pointer", (long long)f);
			return -1;
		}
		if (!(size_bits[f] >= 0.0) || !(latency[f] >= 0.0)) {
			say(err, errlen, "flow %lld: size or latency negative or NaN", (long long)f);
			return -1;
		}
	}
	for (int64_t e = 0; e < s->indptr[s->n]; e++) {
		if (s->arc[e] < 0 || s->arc[e] >= s->narcs) {
			say(err, errlen, "entry %lld: arc %lld out of range", (long long)e,
			    (long long)s->arc[e]);
			return -1;
		}
		if (!(s->weight[e] > 0.0) || s->weight[e] != floor(s->weight[e])) {
			say(err, errlen, "entry %lld: weight %g is not a positive integer",
			    (long long)e, s->weight[e]);
			return -1;
		}
	}
	for (int64_t a = 0; a < s->narcs; a++) {
		if (!(s->capacity[a] > 0.0)) {
			say(err, errlen, "arc %lld: capacity %g", (long long)a, s->capacity[a]);
			return -1;
		}
	}
	return 0;
}

/* The first half of engine._Loop._event, once the rates are filled in: to the
 * next event, advancing the transmitting flows and recording the segment. */
static int advance(struct sim *s, double *t, const double *start, double *peak,
		   double *seg_start, double *seg_end, int64_t *counts, char *err, size_t errlen)
{
	double t_done = INFINITY, t_start = INFINITY, least = INFINITY, t_next, dt;
	int nan = 0;

	for (int64_t i = 0; i < s->nactive; i++) {
		int64_t f = s->active[i];
		double go = isinf(s->rate[f]) ? 0.0 : s->remaining[f] / s->rate[f];

		s->to_go[i] = go;
		if (isnan(go))
			nan = 1;
		else if (go < least)
			least = go;
	}
	if (s->nactive)
		t_done = nan ? NAN : *t + least;
	for (int64_t i = 0; i < s->npending; i++)
		if (start[s->pending[i]] < t_start)
			t_start = start[s->pending[i]];
	/* Python's min(t_done, t_start): the first unless the second is smaller */
	t_next = t_start < t_done ? t_start : t_done;
	if (!isfinite(t_next)) {
		say(err, errlen, "simulation stalled at t=%.17g s: no flow can progress", *t);
		return SDNMPI_SIM_ESTALL;
	}
	dt = t_next - *t;
	if (dt > 0 && s->nactive) {
		for (int64_t i = 0; i < s->nactive; i++) {
			int64_t f = s->active[i];

			s->remaining[f] -= isfinite(s->rate[f]) ? s->rate[f] * dt : 0.0;
		}
		for (int64_t a = 0; a < s->narcs; a++)
			if (s->arc_rate[a] > peak[a])
				peak[a] = s->arc_rate[a];
		seg_start[counts[0]] = *t;
		seg_end[counts[0]] = *t + dt;
		counts[0]++;
	}
	*t = t_next;
	counts[1]++;
	return 0;
}

EXPORT int sdnmpi_sim_phase(int64_t n, int64_t narcs, const int64_t *indptr, const int64_t *arc,
			    const double *weight, const double *capacity,
			    const double *size_bits, const double *latency, double rtol,
			    double ulps, double *start, double *finish, double *peak,
			    double *seg_start, double *seg_end, int64_t *counts, char *err,
			    size_t errlen)
{
	struct sim s;
	double t = 0.0;
	int rc = SDNMPI_SIM_OK;

	memset(&s, 0, sizeof(s));
	s.n = n;
	s.narcs = narcs;
	s.indptr = indptr;
	s.arc = arc;
	s.weight = weight;
	s.capacity = capacity;
	s.rtol = rtol;
	counts[0] = counts[1] = 0;
	if (check(&s, size_bits, latency, err, errlen))
		return SDNMPI_SIM_EINPUT;
	if (alloc_sim(&s, indptr[n])) {
		release_sim(&s);
		say(err, errlen, "out of memory for %lld flows", (long long)n);
		return SDNMPI_SIM_ENOMEM;
	}
	build_by_arc(&s);
	s.resume = INT64_MAX;
	for (int64_t a = 0; a < narcs; a++)
		peak[a] = 0.0;
	for (int64_t f = 0; f < n; f++) {
		s.remaining[f] = size_bits[f];
		s.rate[f] = INFINITY;
		s.stage[f] = -1;
		start[f] = t + latency[f];
		finish[f] = INFINITY;
		s.pending[s.npending++] = f;
	}
	while (s.nactive || s.npending) {
		double t0, dt, tol, horizon;
		int64_t kept = 0, nstart = 0, ia, is, m;

		/* every event ends or starts a flow: at most 2n events, so the 2n + 1
		 * segments' room is never exceeded */
		if (counts[1] >= 2 * n + 1) {
			say(err, errlen, "no progress after %lld events", (long long)counts[1]);
			rc = SDNMPI_SIM_ESTALL;
			break;
		}
		if (refill(&s)) {
			say(err, errlen, "out of memory for the filling's history");
			rc = SDNMPI_SIM_ENOMEM;
			break;
		}
		arc_rates(&s);
		t0 = t;
		rc = advance(&s, &t, start, peak, seg_start, seg_end, counts, err, errlen);
		if (rc)
			break;
		dt = t - t0;
		tol = rtol * dt + ulps * fabs(t);
		horizon = dt + tol;
		/* _complete: the transmitting flows due within the horizon */
		for (int64_t i = 0; i < s.nactive; i++) {
			int64_t f = s.active[i];

			if (s.to_go[i] <= horizon) {
				finish[f] = t;
				s.remaining[f] = 0.0;
				leave(&s, f);
			} else {
				s.active[kept++] = f;
			}
		}
		s.nactive = kept;
		/* _activate: flows whose latency is paid start, merged in order */
		kept = 0;
		for (int64_t i = 0; i < s.npending; i++) {
			int64_t f = s.pending[i];

			if (start[f] <= t + tol) {
				if (t < start[f])
					start[f] = t;
				s.scratch[nstart++] = f;
				arrive(&s, f);
			} else {
				s.pending[kept++] = f;
			}
		}
		s.npending = kept;
		if (nstart) {
			/* the starting flows ascend (pending keeps release order, and
			 * every flow is released at 0 in index order): merge the two runs
			 * from the back into active */
			ia = s.nactive - 1;
			is = nstart - 1;
			m = s.nactive + nstart;
			while (is >= 0) {
				if (ia >= 0 && s.active[ia] > s.scratch[is])
					s.active[--m] = s.active[ia--];
				else
					s.active[--m] = s.scratch[is--];
			}
			s.nactive += nstart;
		}
	}
	release_sim(&s);
	return rc;
}
