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
      const seen = { topic, body: new TextDecoder().decode(payload), qos: packet.qos, properties: packet.properties };
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
