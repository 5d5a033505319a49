// One scenario for mqtt.js (MQTT.js 5) against a raftmq group's leader, run in Node
// (mqtt_node.mjs: over TCP to the MQTT port, and over WebSocket to the client port) and in a
// browser page (tests/server/test_mqttjs.py). It resolves to a report of what it saw, in words
// the test compares; every wait is bounded.
globalThis.runMqttScenario = async function runMqttScenario(mqtt, url, version) {
  const report = { ok: false, steps: [] };
  const step = (line) => report.steps.push(line);
  const within = (ms, what, promise) => Promise.race([
    promise,
    new Promise((_, reject) => setTimeout(() => reject(new Error(`timed out: ${what}`)), ms)),
  ]);
  const five = version === 5;
  const kept = five ? { sessionExpiryInterval: 0xFFFFFFFF } : undefined;
  const arrivals = (client) => {
    const queue = [];
    const waiters = [];
    client.on('message', (topic, payload, packet) => {
      const seen = {
        topic, body: new TextDecoder().decode(payload), qos: packet.qos, retain: packet.retain,
        properties: packet.properties,
      };
      const waiter = waiters.shift();
      if (waiter) waiter(seen); else queue.push(seen);
    });
    return (what) => within(10000, what, new Promise((resolve) => {
      if (queue.length) resolve(queue.shift()); else waiters.push(resolve);
    }));
  };
  const connect = (clientId, clean) => within(10000, `connect ${clientId}`, new Promise((resolve, reject) => {
    const client = mqtt.connect(url, {
      protocolVersion: version, clientId, clean, reconnectPeriod: 0, connectTimeout: 8000,
      properties: clean ? undefined : kept,
    });
    const next = arrivals(client);  // before the CONNACK: a kept session's messages may come right behind it
    client.once('connect', (connack) => resolve({ client, next, present: Boolean(connack.sessionPresent) }));
    // A client that does not reconnect waits for ever on what it sent before a close: say so.
    client.on('disconnect', (packet) => step(`${clientId} told to disconnect: ${packet.reasonCode} ${
      (packet.properties || {}).reasonString || ''}`));
    client.on('close', () => { if (!client.disconnecting) step(`${clientId} closed by the server`); });
    client.once('error', reject);
  }));
  const sorted = (messages) => messages.map((m) => `${m.topic} ${m.body} qos${m.qos}`).sort().join('|');
  let subscriber;
  let publisher;
  try {
    const subscriberId = `js-keeper-${version}-${Math.random().toString(16).slice(2, 8)}`;
    const first = await connect(subscriberId, false);
    subscriber = first.client;
    step(`connected: session present ${first.present}`);
    let next = first.next;
    const granted = await within(10000, 'subscribe', subscriber.subscribeAsync(
      { 'js/+/temp': { qos: 1 }, 'js/#': { qos: 2 } }));
    step(`granted: ${granted.map((g) => g.qos).join(',')}`);
    publisher = (await connect(`js-publisher-${version}`, true)).client;
    const properties = five ? { userProperties: { unit: 'C' }, contentType: 'text/plain' } : undefined;
    await within(10000, 'publish', publisher.publishAsync('js/room1/temp', '21.5', { qos: 1, properties }));
    const both = [await next('first copy'), await next('second copy')];
    step(`received: ${sorted(both)}`);
    if (five) {
      const p = both[0].properties || {};
      step(`properties: unit=${(p.userProperties || {}).unit} content-type=${p.contentType}`);
    }
    await within(10000, 'publish qos 0', publisher.publishAsync('js/room2/temp', '19', { qos: 0 }));
    step(`received: ${sorted([await next('qos 0 copy'), await next('qos 0 copy 2')])}`);
    await within(10000, 'end', subscriber.endAsync());
    await within(10000, 'publish while away', publisher.publishAsync('js/room3/temp', 'while away', { qos: 1 }));
    const back = await connect(subscriberId, false);
    subscriber = back.client;
    next = back.next;
    step(`back: session present ${back.present}`);
    step(`received: ${sorted([await next('kept copy'), await next('kept copy 2')])}`);
    await within(10000, 'end', subscriber.endAsync());
    const fresh = await connect(subscriberId, true);
    subscriber = fresh.client;
    step(`clean start: session present ${fresh.present}`);
    next = fresh.next;
    // QoS 2 in, delivered at the granted QoS 1; a retained message for a later subscription.
    await within(10000, 'subscribe qos2', subscriber.subscribeAsync(`js/${version}/once`, { qos: 2 }));
    await within(10000, 'publish qos 2', publisher.publishAsync(`js/${version}/once`, 'exactly', { qos: 2 }));
    const once = await next('qos 2 copy');
    step(`qos 2: ${once.body} qos${once.qos}`);
    await within(10000, 'retain', publisher.publishAsync(`js/${version}/status`, 'online', { qos: 1, retain: true }));
    await within(10000, 'subscribe retained', subscriber.subscribeAsync(`js/${version}/status`, { qos: 1 }));
    const retained = await next('retained copy');
    await within(10000, 'forget', publisher.publishAsync(`js/${version}/status`, '', { qos: 1, retain: true }));
    const cleared = await next('the empty one, live');  // MQTT: it reaches the subscribers as any other
    step(`retained: ${retained.body} retain ${retained.retain}, then '${cleared.body}' retain ${cleared.retain}`);
    // A will: its client goes without a DISCONNECT.
    await within(10000, 'subscribe will', subscriber.subscribeAsync(`js/${version}/will`, { qos: 1 }));
    const doomed = await within(10000, 'connect doomed', new Promise((resolve, reject) => {
      const client = mqtt.connect(url, {
        protocolVersion: version, clientId: `js-doomed-${version}`, reconnectPeriod: 0, connectTimeout: 8000,
        will: { topic: `js/${version}/will`, payload: 'gone', qos: 1, retain: false },
      });
      client.once('connect', () => resolve(client));
      client.once('error', reject);
    }));
    doomed.stream.destroy();
    const will = await next('will');
    step(`will: ${will.body}`);
    doomed.end(true);
    // A shared subscription: two members, each job to one of them.
    const members = [];
    const jobs = [];
    for (const n of [1, 2]) {
      const member = await connect(`js-member-${version}-${n}`, true);
      member.client.on('message', (topic, payload) => jobs.push(new TextDecoder().decode(payload)));
      await within(10000, 'subscribe share', member.client.subscribeAsync(`$share/js/js/${version}/jobs`, { qos: 1 }));
      members.push(member.client);
    }
    for (const n of [1, 2, 3, 4]) {
      await within(10000, 'publish job', publisher.publishAsync(`js/${version}/jobs`, `job${n}`, { qos: 1 }));
    }
    await within(10000, 'four jobs', new Promise((resolve) => {
      const look = () => (jobs.length >= 4 ? resolve() : setTimeout(look, 20));
      look();
    }));
    await new Promise((resolve) => setTimeout(resolve, 300));  // none comes twice
    step(`shared: ${jobs.sort().join(',')}`);
    for (const member of members) member.end(true);
    report.ok = true;
  } catch (error) {
    report.error = String(error && error.message ? error.message : error);
  } finally {
    for (const client of [subscriber, publisher]) {
      if (client) client.end(true);
    }
  }
  return report;
};
