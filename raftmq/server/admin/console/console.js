// The raftmq web console: reads the admin port's JSON API (docs/management.md) every two
// seconds and renders it; its buttons post the API's changes. Same origin, so the browser
// sends the HTTP Basic login it asked for when the page loaded; on a follower's page the
// member passes a change on to the leader (with that login) and answers with the leader's
// answer. Each change carries the page's anti-forgery token (X-Raftmq-Token, from
// GET api/session; asked again once when the node answers that it no longer holds). Data goes
// into the page only through textContent and attributes, never as HTML.
"use strict";

(function () {
  const POLL_MS = 2000;
  const REQUEST_TIMEOUT_MS = 8000;
  const MESSAGE_LIMIT = 100;
  const ACTION_MESSAGE_MS = 15000; // an action's outcome stays in the status line this long
  const BODY_PREVIEW_CHARS = 80;
  const DASH = "\u2013";

  const state = {
    polls: 0,
    timer: null,
    polling: false,
    again: false,
    action: null, // {kind, text, at}: the last action's outcome
    readErrors: [],
    leaderFromConflict: null, // leader_admin of the last 409
    token: null, // {header, value}: this page's anti-forgery token (api/session)
  };

  // --- the API --------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, message, data) {
      super(message);
      this.status = status;
      this.data = data;
    }
  }

  // Where "api/..." lives: beside this page, without any user:password@ the page was opened
  // with (fetch refuses URLs with credentials; the browser sends the login it has cached).
  function apiUrl(path) {
    const base = new URL(".", window.location.href);
    base.username = "";
    base.password = "";
    base.search = "";
    base.hash = "";
    return new URL(path, base).href;
  }

  // The token a change carries: asked for once, and again when `renew` (the node restarted,
  // or the token expired: it answers 403 with token "invalid").
  async function antiForgery(renew) {
    if (state.token === null || renew) {
      const answer = await request("GET", "api/session");
      state.token = { header: answer.token_header, value: answer.token };
    }
    return state.token;
  }

  async function api(method, path, body) {
    if (method === "GET") return request(method, path, body);
    try {
      return await request(method, path, body, await antiForgery(false));
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 403 && error.data && error.data.token === "invalid")) throw error;
      return request(method, path, body, await antiForgery(true));
    }
  }

  async function request(method, path, body, token) {
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), REQUEST_TIMEOUT_MS);
    const init = {
      method: method,
      headers: { Accept: "application/json" },
      credentials: "same-origin",
      cache: "no-store",
      signal: controller.signal,
    };
    if (token) init.headers[token.header] = token.value;
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    let text;
    try {
      response = await fetch(apiUrl(path), init);
      text = await response.text();
    } catch (error) {
      const why = error && error.name === "AbortError"
        ? "no answer within " + REQUEST_TIMEOUT_MS / 1000 + " s"
        : "cannot reach the node (" + (error && error.message ? error.message : String(error)) + ")";
      throw new ApiError(0, why, null);
    } finally {
      clearTimeout(timer);
    }
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (error) {
        data = null;
      }
    }
    if (!response.ok) {
      let message = data && typeof data.error === "string" ? data.error : response.statusText || "request failed";
      if (response.status === 401) {
        message = "login required: reload the page to log in";
      }
      if (response.status === 409 && data && typeof data.leader_admin === "string" && data.leader_admin) {
        state.leaderFromConflict = data.leader_admin;
        showLeader(data.leader_admin);
        message += " (the leader is at " + data.leader_admin + ")";
      }
      throw new ApiError(response.status, message, data);
    }
    if (data === null || typeof data !== "object") {
      throw new ApiError(response.status, "the answer is not JSON", null);
    }
    return data;
  }

  // --- formatting -----------------------------------------------------------------------

  function fmt(value) {
    if (value === null || value === undefined || value === "") return DASH;
    if (typeof value === "boolean") return value ? "yes" : "no";
    if (Array.isArray(value)) return value.length ? value.map(fmt).join(", ") : DASH;
    if (typeof value === "object") return JSON.stringify(value);
    return String(value);
  }

  function fmtRate(value) {
    if (typeof value !== "number" || !isFinite(value)) return DASH;
    return value >= 100 ? String(Math.round(value)) : value.toFixed(1);
  }

  function fmtTime(value) {
    if (value === null || value === undefined || value === "") return DASH;
    if (typeof value === "number" && isFinite(value)) {
      // Seconds or milliseconds since the epoch, whichever makes a date after 2001.
      const ms = value > 1e12 ? value : value * 1000;
      const date = new Date(ms);
      return isNaN(date.getTime()) ? String(value) : date.toLocaleString();
    }
    return String(value);
  }

  function adminUrl(admin) {
    // "host:port" (or already a URL): the console of that member. Only http(s) links.
    const text = String(admin);
    if (/^https?:\/\//i.test(text)) return text.replace(/\/*$/, "/");
    if (text.includes("://")) return null;
    return window.location.protocol + "//" + text + "/";
  }

  // --- the page -------------------------------------------------------------------------

  function $(id) {
    return document.getElementById(id);
  }

  function setText(element, text) {
    if (element && element.textContent !== text) element.textContent = text;
  }

  function renderStatus() {
    const status = $("status");
    const now = Date.now();
    const action = state.action && now - state.action.at < ACTION_MESSAGE_MS ? state.action : null;
    // The last action's outcome (for a while) and what the last refresh could not read.
    const parts = [];
    if (action) parts.push(action.text);
    parts.push(...state.readErrors);
    let kind = action ? action.kind : "ok";
    if (state.readErrors.length) kind = "error";
    const text = parts.length ? parts.join(" \u2014 ") : "Up to date";
    status.dataset.state = kind;
    setText(status, text);
  }

  function setAction(kind, text) {
    state.action = { kind: kind, text: text, at: Date.now() };
    renderStatus();
  }

  function showLeader(admin) {
    const notice = $("leader-notice");
    const link = $("leader-link");
    const url = adminUrl(admin);
    if (url) {
      link.setAttribute("href", url);
    } else {
      link.removeAttribute("href");
    }
    link.dataset.leaderAdmin = String(admin);
    setText(link, "the leader is at " + admin);
    notice.hidden = false;
  }

  function hideLeader() {
    $("leader-notice").hidden = true;
  }

  function setNote(id, text) {
    const note = $(id);
    setText(note, text);
    note.hidden = !text;
  }

  // Rows keyed by an attribute (data-destination, data-message-id, ...): kept across polls
  // and updated in place, so a row (and its buttons) stays the same element while it exists.
  function syncRows(table, items, keyOf, attr, create, update) {
    const tbody = table.tBodies[0];
    const existing = new Map();
    for (const row of Array.from(tbody.rows)) existing.set(row.getAttribute(attr), row);
    const seen = new Set();
    let previous = null;
    for (const item of items) {
      const key = String(keyOf(item));
      if (seen.has(key)) continue;
      seen.add(key);
      let row = existing.get(key);
      if (!row) {
        row = create(item, key);
        row.setAttribute(attr, key);
      }
      update(row, item);
      const wanted = previous ? previous.nextSibling : tbody.firstChild;
      if (row !== wanted) tbody.insertBefore(row, wanted);
      previous = row;
    }
    for (const [key, row] of existing) {
      if (!seen.has(key)) row.remove();
    }
  }

  function newRow(classes) {
    const row = document.createElement("tr");
    for (const name of classes) {
      const cell = document.createElement("td");
      cell.className = name;
      row.appendChild(cell);
    }
    return row;
  }

  function cell(row, name) {
    return row.querySelector("td." + name);
  }

  function fill(row, values) {
    for (const name of Object.keys(values)) setText(cell(row, name), values[name]);
  }

  function button(label, action, data, title) {
    const element = document.createElement("button");
    element.type = "button";
    element.textContent = label;
    element.title = title;
    element.dataset.action = action;
    for (const name of Object.keys(data)) element.dataset[name] = data[name];
    return element;
  }

  // --- panels ---------------------------------------------------------------------------

  // "2 connections · 1 kept session · 3 retained · 0 wills": MQTT's figures in the overview.
  function mqttLine(mqtt) {
    const count = (key, one, many) => {
      const n = Number(mqtt[key] || 0);
      return n + " " + (n === 1 ? one : many);
    };
    return [count("connections", "connection", "connections"), count("kept_sessions", "kept session", "kept sessions"),
            count("retained", "retained", "retained"), count("wills", "will", "wills")].join(" \u00b7 ");
  }

  function renderOverview(overview) {
    setNote("overview-note", "");
    const summary = $("overview-summary");
    for (const field of ["group", "node", "role", "leader", "term", "destinations", "connections"]) {
      setText(summary.querySelector('[data-field="' + field + '"]'), fmt(overview[field]));
    }
    setText(summary.querySelector('[data-field="mqtt"]'), mqttLine(overview.mqtt || {}));
    renderDrain(overview.drain, overview.group);
    setText($("title-group"), fmt(overview.group));
    setText($("title-node"), overview.node ? " \u00b7 " + overview.node : "");
    document.title = "raftmq " + fmt(overview.group) + (overview.node ? " \u00b7 " + overview.node : "");
    document.body.dataset.role = fmt(overview.role);

    const members = Array.isArray(overview.members) ? overview.members : [];
    syncRows($("members-table"), members, (m) => m.node, "data-node",
      () => newRow(["node", "client", "admin", "role", "health"]),
      (row, m) => {
        fill(row, { node: fmt(m.node), client: fmt(m.client), role: fmt(m.role), health: fmt(m.health) });
        row.dataset.role = fmt(m.role);
        row.dataset.health = fmt(m.health);
        row.classList.toggle("self", m.node === overview.node);
        const admin = cell(row, "admin");
        const url = m.admin ? adminUrl(m.admin) : null;
        let link = admin.querySelector("a");
        if (url) {
          if (!link) {
            link = document.createElement("a");
            admin.textContent = "";
            admin.appendChild(link);
          }
          if (link.getAttribute("href") !== url) link.setAttribute("href", url);
          setText(link, String(m.admin));
        } else {
          setText(admin, fmt(m.admin));
        }
      });

    const links = Array.isArray(overview.links) ? overview.links : [];
    syncRows($("links-table"), links, (l) => l.from + "->" + l.to, "data-link",
      () => newRow(["from", "to", "state", "waiting", "forwarded", "first"]),
      (row, l) => {
        fill(row, { from: fmt(l.from), to: fmt(l.to), state: fmt(l.state), waiting: fmt(l.waiting),
          forwarded: fmt(l.forwarded),
          first: fmt(l.forwarded_first) + (l.fell_back ? " (fell back: " + fmt(l.fell_back) + ")" : "") });
        row.dataset.state = fmt(l.state);
        row.title = Object.keys(l).filter((k) => !["from", "to", "state", "waiting", "forwarded", "forwarded_first"].includes(k))
          .map((k) => k + ": " + fmt(l[k])).join("\n");
      });
    const clustered = overview.groups && Object.keys(overview.groups).length > 0;
    setNote("links-note", links.length ? "" : overview.role !== "leader" && clustered
      ? "Links are run by the group's leader: open its console to see them."
      : "No links: this group is not part of a cluster.");

    const groups = overview.groups && typeof overview.groups === "object" ? overview.groups : {};
    const groupList = Object.keys(groups).sort().map((name) => Object.assign({ name: name }, groups[name]));
    const peers = overview.peers && typeof overview.peers === "object" ? overview.peers : {};
    const describe = (members) => (Array.isArray(members) ? members : [])
      .map((m) => fmt(m.node) + " (" + fmt(m.role) + ", " + fmt(m.health) + ")").join(" · ");
    syncRows($("groups-table"), groupList, (g) => g.name, "data-group",
      () => newRow(["name", "hops", "via", "members"]),
      (row, g) => fill(row, { name: g.name, hops: fmt(g.hops), via: fmt(g.via), members: describe(peers[g.name]) }));
    setNote("groups-note", groupList.length ? "" : "No other groups known.");

    // A follower passes changes on to the leader: say where it is.
    if (overview.role === "leader") {
      state.leaderFromConflict = null;
      hideLeader();
    } else {
      const leader = members.find((m) => m.role === "leader" || (overview.leader && m.node === overview.leader));
      if (leader && leader.admin) {
        showLeader(leader.admin);
      } else if (state.leaderFromConflict) {
        showLeader(state.leaderFromConflict);
      }
    }
  }

  // A group that `raftmq group drain` empties turns every client away: say so, in the title
  // bar and the cluster panel, until it stops draining.
  function renderDrain(drain, group) {
    const state = drain && typeof drain === "object" ? (drain.state === "drained" ? "drained" : "draining") : "serving";
    setText($("overview-summary").querySelector('[data-field="state"]'), state);
    document.body.dataset.drain = state;
    const notice = $("drain-notice");
    if (state === "serving") {
      notice.hidden = true;
      setText(notice, "");
      return;
    }
    const to = Array.isArray(drain.to) && drain.to.length ? drain.to.join(", ") : "every group it reaches";
    const left = typeof drain.left === "number" ? drain.left : null;
    const text = state === "drained"
      ? "Group " + fmt(group) + " is DRAINED to " + to + ": " + fmt(drain.moved) + " moved, nothing left; it turns every"
        + " client away (stop it, or `raftmq group drain " + fmt(group) + " --cancel`)"
      : "Group " + fmt(group) + " is DRAINING to " + to + ": " + fmt(drain.moved) + " moved"
        + (left === null ? "" : ", " + left + " left") + "; it turns every client away";
    setText(notice, text);
    notice.dataset.state = state;
    notice.hidden = false;
  }

  function renderDestinations(answer) {
    const list = Array.isArray(answer.destinations) ? answer.destinations : [];
    syncRows($("destinations-table"), list, (d) => d.destination, "data-destination",
      (d, key) => {
        const row = newRow(["destination", "kind", "depth", "in-flight", "consumers", "enqueued", "dequeued",
          "expired", "dead-lettered", "scheduled", "rate-in", "rate-out", "rate-groups", "actions"]);
        if (d.internal) {
          // The cluster's own queue (store-and-forward, control): the API takes no change to it.
          row.dataset.internal = "true";
          row.title = key + " belongs to the cluster's bridges: it cannot be purged or deleted";
          return row;
        }
        const actions = cell(row, "actions");
        actions.appendChild(button("Purge", "purge", { destination: key }, "Purge " + key));
        actions.appendChild(button("Delete", "delete", { destination: key }, "Delete " + key));
        return row;
      },
      (row, d) => {
        fill(row, {
          destination: fmt(d.destination), kind: fmt(d.kind) + (d.internal ? " (internal)" : ""), depth: fmt(d.depth),
          "in-flight": fmt(d.in_flight),
          consumers: fmt(d.consumers), enqueued: fmt(d.enqueued), dequeued: fmt(d.dequeued),
          expired: fmt(d.expired), "dead-lettered": fmt(d.dead_lettered), scheduled: fmt(d.scheduled),
          "rate-in": fmtRate(d.rate_in), "rate-out": fmtRate(d.rate_out),
          "rate-groups": d.forwarded === undefined ? "" : "out " + fmtRate(d.rate_forward) + " · in " + fmtRate(d.rate_arrive),
        });
        row.dataset.kind = fmt(d.kind);
      });
    setNote("destinations-note", list.length ? "" : "No destinations.");
  }

  function renderConnections(answer) {
    const list = Array.isArray(answer.connections) ? answer.connections : [];
    syncRows($("connections-table"), list, (c) => c.session, "data-session",
      (c, key) => {
        const row = newRow(["session", "peer", "transport", "login", "client-id", "version", "since", "subscriptions", "actions"]);
        if (c.kind !== "link") {  // a cluster link's session comes back by itself: nothing to close
          cell(row, "actions").appendChild(button("Close", "close", { session: key }, "Close connection " + key));
        }
        return row;
      },
      (row, c) => fill(row, {
        session: fmt(c.session), peer: fmt(c.peer), transport: fmt(c.transport), login: fmt(c.login),
        "client-id": fmt(c.client_id),
        version: fmt(c.version), since: fmtTime(c.since),
        subscriptions: Array.isArray(c.subscriptions) ? String(c.subscriptions.length) : fmt(c.subscriptions),
      }));
    setNote("connections-note", list.length ? "" : "No connections.");
  }

  function consumerKey(c) {
    return [c.destination, c.durable_name || "", c.durable_name ? "" : c.session || "", c.sub_id].join("|");
  }

  function renderConsumers(answer) {
    const list = Array.isArray(answer.consumers) ? answer.consumers : [];
    syncRows($("consumers-table"), list, consumerKey, "data-consumer",
      () => newRow(["destination", "sub-id", "session", "durable-name", "active", "selector", "ack", "prefetch",
        "in-flight", "last-activity"]),
      (row, c) => {
        fill(row, {
          destination: fmt(c.destination), "sub-id": fmt(c.sub_id), session: fmt(c.session),
          "durable-name": fmt(c.durable_name), active: fmt(c.active), selector: fmt(c.selector), ack: fmt(c.ack),
          prefetch: fmt(c.prefetch), "in-flight": fmt(c.in_flight), "last-activity": fmtTime(c.last_activity),
        });
        row.dataset.active = c.active ? "true" : "false";
        row.dataset.destination = fmt(c.destination);
      });
    setNote("consumers-note", list.length ? "" : "No consumers.");
  }

  function renderMessages(answer) {
    const list = Array.isArray(answer.messages) ? answer.messages : [];
    syncRows($("dlq-table"), list, (m) => m.message_id, "data-message-id",
      (m, key) => {
        const row = newRow(["message-id", "original-destination", "delivery-count", "priority", "size", "timestamp",
          "body", "actions"]);
        const actions = cell(row, "actions");
        actions.appendChild(button("Retry", "retry", { id: key }, "Send " + key + " back to its original destination"));
        actions.appendChild(button("Move", "move", { id: key }, "Move " + key + " to \u201cMove to\u201d"));
        return row;
      },
      (row, m) => {
        const body = typeof m.body === "string" ? m.body : fmt(m.body);
        fill(row, {
          "message-id": fmt(m.message_id), "original-destination": fmt(m.original_destination),
          "delivery-count": fmt(m.delivery_count), priority: fmt(m.priority), size: fmt(m.size),
          timestamp: fmtTime(m.timestamp),
          body: body.length > BODY_PREVIEW_CHARS ? body.slice(0, BODY_PREVIEW_CHARS) + "\u2026" : body,
        });
        row.dataset.originalDestination = fmt(m.original_destination);
        cell(row, "body").title = body;
        const headers = Array.isArray(m.headers) ? m.headers : [];
        cell(row, "message-id").title = headers.map((h) => (Array.isArray(h) ? h.join(": ") : fmt(h))).join("\n");
      });
    const source = dlqSource();
    let note = list.length ? "" : "No messages on " + source + ".";
    if (answer.truncated) note = "Showing the first " + list.length + " messages of " + source + ".";
    setNote("dlq-note", note);
    $("dlq-table").dataset.source = source;
  }

  // --- polling --------------------------------------------------------------------------

  function dlqSource() {
    return $("dlq-source").value.trim() || "/queue/DLQ";
  }

  const PANELS = [
    { name: "overview", path: () => "api/overview", render: renderOverview, note: "overview-note",
      tables: ["members-table", "links-table", "groups-table"] },
    { name: "destinations", path: () => "api/destinations", render: renderDestinations, note: "destinations-note",
      tables: ["destinations-table"] },
    { name: "connections", path: () => "api/connections", render: renderConnections, note: "connections-note",
      tables: ["connections-table"] },
    { name: "consumers", path: () => "api/consumers", render: renderConsumers, note: "consumers-note",
      tables: ["consumers-table"] },
    { name: "messages",
      path: () => "api/messages?destination=" + encodeURIComponent(dlqSource()) + "&limit=" + MESSAGE_LIMIT,
      render: renderMessages, note: "dlq-note", tables: ["dlq-table"] },
  ];

  async function poll() {
    const answers = await Promise.allSettled(PANELS.map((panel) => api("GET", panel.path())));
    const errors = [];
    answers.forEach((answer, i) => {
      const panel = PANELS[i];
      if (answer.status === "fulfilled") {
        for (const id of panel.tables) $(id).classList.remove("stale");
        try {
          panel.render(answer.value);
        } catch (error) {
          errors.push({ panel: panel.name, message: "cannot show the answer (" + error.message + ")" });
        }
        return;
      }
      const error = answer.reason;
      const status = error instanceof ApiError ? error.status : 0;
      if (status === 403) {
        for (const id of panel.tables) $(id).tBodies[0].replaceChildren();
        setNote(panel.note, "Not permitted: " + error.message);
      } else if (status === 404 && panel.name === "messages") {
        // A dead-letter queue nothing was ever dead-lettered to may not exist yet.
        for (const id of panel.tables) $(id).tBodies[0].replaceChildren();
        setNote(panel.note, "No messages on " + dlqSource() + " (" + error.message + ").");
      } else {
        // Keep what was last read, marked as such, until the next answer.
        for (const id of panel.tables) $(id).classList.add("stale");
        setNote(panel.note, "Cannot read (showing the last answer): " + error.message);
        errors.push({ panel: panel.name, message: error.message + (status ? " (HTTP " + status + ")" : "") });
      }
    });
    // One line per distinct error ("overview, destinations: cannot reach the node ...").
    const byMessage = new Map();
    for (const error of errors) {
      if (!byMessage.has(error.message)) byMessage.set(error.message, []);
      byMessage.get(error.message).push(error.panel);
    }
    state.readErrors = Array.from(byMessage, ([message, panels]) => panels.join(", ") + ": " + message);
    renderStatus();
    setText($("updated"), "Updated " + new Date().toLocaleTimeString());
    state.polls += 1;
    document.body.dataset.polls = String(state.polls);
  }

  async function refresh() {
    if (state.polling) {
      state.again = true;
      return;
    }
    state.polling = true;
    clearTimeout(state.timer);
    try {
      await poll();
    } catch (error) {
      state.readErrors = ["cannot refresh: " + (error && error.message ? error.message : String(error))];
      renderStatus();
    } finally {
      state.polling = false;
      const delay = state.again ? 0 : POLL_MS;
      state.again = false;
      state.timer = setTimeout(refresh, delay);
    }
  }

  // --- changes --------------------------------------------------------------------------

  function describe(answer) {
    const parts = Object.keys(answer).filter((k) => k !== "ok").map((k) => k + " " + fmt(answer[k]));
    return parts.length ? parts.join(", ") : "done";
  }

  async function change(control, label, path, body) {
    if (control) control.disabled = true;
    setAction("busy", label + "\u2026");
    try {
      const answer = await api("POST", path, body);
      setAction("ok", label + ": " + describe(answer));
      return true;
    } catch (error) {
      const status = error instanceof ApiError && error.status ? " (HTTP " + error.status + ")" : "";
      setAction("error", label + " failed: " + error.message + status);
      return false;
    } finally {
      if (control) control.disabled = false;
      refresh();
    }
  }

  function moveTarget() {
    const target = $("dlq-move-to").value.trim();
    if (!target) {
      setAction("error", "Fill in \u201cMove to\u201d with the destination to move to");
      $("dlq-move-to").focus();
      return null;
    }
    return target;
  }

  function onClick(event) {
    const control = event.target.closest("button[data-action]");
    if (!control || control.disabled) return;
    const action = control.dataset.action;
    const source = dlqSource();
    if (action === "purge") {
      const destination = control.dataset.destination;
      if (window.confirm("Purge every message of " + destination + "?")) {
        change(control, "Purge " + destination, "api/destinations/purge", { destination: destination });
      }
    } else if (action === "delete") {
      const destination = control.dataset.destination;
      if (window.confirm("Delete " + destination + "? Its consumers are closed.")) {
        change(control, "Delete " + destination, "api/destinations/delete", { destination: destination });
      }
    } else if (action === "close") {
      const session = control.dataset.session;
      if (window.confirm("Close connection " + session + "?")) {
        change(control, "Close " + session, "api/connections/close", { session: session });
      }
    } else if (action === "retry") {
      change(control, "Retry " + control.dataset.id, "api/messages/retry", { from: source, ids: [control.dataset.id] });
    } else if (action === "retry-all") {
      if (window.confirm("Send every message of " + source + " back to its original destination?")) {
        change(control, "Retry all of " + source, "api/messages/retry", { from: source, all: true });
      }
    } else if (action === "move") {
      const target = moveTarget();
      if (target) {
        change(control, "Move " + control.dataset.id + " to " + target, "api/messages/move",
          { from: source, ids: [control.dataset.id], to: target });
      }
    } else if (action === "move-all") {
      const target = moveTarget();
      if (target && window.confirm("Move every message of " + source + " to " + target + "?")) {
        change(control, "Move all of " + source + " to " + target, "api/messages/move",
          { from: source, all: true, to: target });
      }
    }
  }

  async function onCreate(event) {
    event.preventDefault();
    const input = $("create-destination");
    const destination = input.value.trim();
    if (!destination) return;
    const done = await change($("create-button"), "Create " + destination, "api/destinations/create",
      { destination: destination });
    if (done) input.value = "";
  }

  function start() {
    document.addEventListener("click", onClick);
    $("create-form").addEventListener("submit", onCreate);
    $("dlq-form").addEventListener("submit", (event) => {
      event.preventDefault();
      refresh();
    });
    $("dlq-source").addEventListener("change", () => refresh());
    setInterval(renderStatus, 1000); // an action's message fades after ACTION_MESSAGE_MS
    refresh();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
