// The service's JSON endpoints and event stream (docs/CONTRACTS.md, "Dashboard JSON").

const TOKEN_KEY = "inasched.tenantToken";

export class ApiError extends Error {
  constructor(status, detail) {
    super(`${status}: ${detail}`);
    this.status = status;
    this.detail = detail;
  }
}

export const token = {
  get() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  },
  set(value) {
    sessionStorage.setItem(TOKEN_KEY, value.trim());
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

export async function request(path, { method = "GET" } = {}) {
  const headers = { Accept: "application/json" };
  const t = token.get();
  if (t) headers.Authorization = `Bearer ${t}`;
  const response = await fetch(path, { method, headers });
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (!response.ok) {
    const detail = body && typeof body === "object" && "detail" in body ? body.detail : body;
    throw new ApiError(response.status, typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return body;
}

export const api = {
  jobs: ({ state = "", limit = 200, offset = 0 } = {}) => {
    const q = new URLSearchParams({ limit: String(limit), offset: String(offset) });
    if (state) q.set("state", state);
    return request(`/jobs?${q}`);
  },
  queue: () => request("/queue"),
  limits: () => request("/limits"),
  job: (id) => request(`/jobs/${encodeURIComponent(id)}`),
  cancel: (id) => request(`/jobs/${encodeURIComponent(id)}/cancel`, { method: "POST" }),
  switch: () => request("/switch"),
  benchRuns: () => request("/bench/runs"),
  benchRun: (id) => request(`/bench/runs/${encodeURIComponent(id)}`),
};

// Subscribes to `/events?token=`; while the stream is down, polls `/switch` every second so the
// heatmap keeps its promised refresh rate. `handlers` maps event names to callbacks.
export class EventStream {
  constructor(handlers, onStatus) {
    this.handlers = handlers;
    this.onStatus = onStatus;
    this.source = null;
    this.pollTimer = null;
    this.retryTimer = null;
  }

  // The stream is per tenant; EventSource cannot send headers, so the token goes in the query.
  start() {
    this.stop();
    const t = token.get();
    if (!t) {
      this.onStatus("no token");
      return;
    }
    const source = new EventSource(`/events?${new URLSearchParams({ token: t })}`);
    this.source = source;
    for (const [name, handler] of Object.entries(this.handlers)) {
      source.addEventListener(name, (event) => {
        let data;
        try {
          data = JSON.parse(event.data);
        } catch {
          return;
        }
        handler(data);
      });
    }
    source.addEventListener("open", () => {
      this.onStatus("live");
      this.stopPolling();
    });
    source.addEventListener("error", () => {
      this.onStatus("reconnecting");
      this.startPolling();
      // A closed source (the server refused the stream) does not retry by itself.
      if (source.readyState === EventSource.CLOSED && !this.retryTimer) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          this.start();
        }, 3000);
      }
    });
  }

  startPolling() {
    if (this.pollTimer || !this.handlers.switch) return;
    this.pollTimer = setInterval(async () => {
      try {
        this.handlers.switch(await api.switch());
      } catch {
        // The service is down; the status badge already says so.
      }
    }, 1000);
  }

  stopPolling() {
    clearInterval(this.pollTimer);
    this.pollTimer = null;
  }

  stop() {
    this.stopPolling();
    clearTimeout(this.retryTimer);
    this.retryTimer = null;
    if (this.source) this.source.close();
    this.source = null;
  }
}
