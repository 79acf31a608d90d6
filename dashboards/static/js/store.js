// The page's shared state: the jobs it knows, which are the tenant's own, the last switch
// snapshot. Views subscribe and re-render from it; the event stream and REST calls feed it.

const listeners = new Set();

export const store = {
  jobs: new Map(), // id -> JobPublic
  ownIds: new Set(), // ids the tenant's `GET /jobs` returned: the ones it may cancel
  jobsTotal: null,
  names: new Map(), // id -> name of every job seen, kept when a filter hides the job
  switch: null, // the last `/switch` payload
  switchAt: 0, // Date.now() when it arrived

  subscribe(listener) {
    listeners.add(listener);
    return () => listeners.delete(listener);
  },

  emit(what) {
    for (const listener of listeners) listener(what);
  },

  putJob(job) {
    if (job.name) this.names.set(job.id, job.name);
    const old = this.jobs.get(job.id);
    this.jobs.set(job.id, old ? { ...old, ...job } : job);
    this.emit({ kind: "job", id: job.id });
  },

  setJobs(items, total) {
    this.jobs = new Map(items.map((job) => [job.id, job]));
    for (const job of items) {
      this.ownIds.add(job.id);
      if (job.name) this.names.set(job.id, job.name);
    }
    this.jobsTotal = total;
    this.emit({ kind: "jobs" });
  },

  forgetTenant() {
    this.jobs = new Map();
    this.ownIds = new Set();
    this.names = new Map();
    this.jobsTotal = null;
    this.emit({ kind: "jobs" });
    // The switch view is the tenant's too (its job ids and counters).
    this.switch = null;
    this.emit({ kind: "switch" });
  },

  setSwitch(snapshot) {
    this.switch = snapshot;
    this.switchAt = Date.now();
    this.emit({ kind: "switch" });
  },

  jobName(id) {
    // A tenant's /switch names only its own jobs: job id 0 is other tenants' aggregators.
    if (Number(id) === 0) return "other tenants";
    return this.names.get(Number(id)) || `job ${id}`;
  },
};
