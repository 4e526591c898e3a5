// The official JavaScript client (npm `@kubernetes/client-node`) against r8s, as its users call
// it: lists, a watch, writes, errors, exec and port-forward over WebSocket, logs. Every check
// asserts; the first failure ends the run with a non-zero status.
// Usage: node js_client.mjs KUBECONFIG
import * as k8s from '@kubernetes/client-node';
import { PassThrough, Writable } from 'node:stream';

const kc = new k8s.KubeConfig();
kc.loadFromFile(process.argv[2]);
const v1 = kc.makeApiClient(k8s.CoreV1Api);

function check(name, ok, got) {
  if (!ok) {
    console.error(`${name}: got ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log('ok', name);
}

function collector() {
  const chunks = [];
  const w = new Writable({ write(c, _e, cb) { chunks.push(Buffer.from(c)); cb(); } });
  w.text = () => Buffer.concat(chunks).toString();
  return w;
}

async function until(what, f, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (f()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  check(what, false, 'timed out');
}

const list = await v1.listNamespacedPod({ namespace: 'default' });
const names = list.items.map((p) => p.metadata.name).sort();
check('list', JSON.stringify(names) === '["sh","web"]', names);

const events = [];
const watch = new k8s.Watch(kc);
const req = await watch.watch('/api/v1/namespaces/default/pods', {}, (type, obj) => {
  events.push(`${type} ${obj.metadata.name}`);
}, () => {});
await until('watch events', () => events.length >= 2);
req.abort();
check('watch', JSON.stringify(events.sort()) === '["ADDED sh","ADDED web"]', events);

const exec = new k8s.Exec(kc);
const out = collector();
const err = collector();
let status;
await exec.exec('default', 'sh', 'sh', ['sh', '-c', 'echo out; echo err >&2'], out, err, null, false,
  (s) => { status = s; });
await until('exec status', () => status !== undefined);
check('exec', out.text() === 'out\n' && err.text() === 'err\n' && status.status === 'Success',
  [out.text(), err.text(), status]);

const catOut = collector();
const stdin = new PassThrough();
await exec.exec('default', 'sh', 'sh', ['cat'], catOut, null, stdin, false);
stdin.write('hello\n');
await until('exec stdin echo', () => catOut.text().includes('hello'));
stdin.end();
check('exec with stdin', catOut.text() === 'hello\n', catOut.text());

const pf = new k8s.PortForward(kc);
const pfIn = new PassThrough();
const pfOut = collector();
const ws = await pf.portForward('default', 'web', [80], pfOut, null, pfIn);
pfIn.write('GET / HTTP/1.0\r\nHost: web\r\n\r\n');
await until('port-forward answer', () => pfOut.text().includes('</html>'));
if (ws && typeof ws.close === 'function') ws.close();
check('port-forward', pfOut.text().startsWith('HTTP/1.1 200 OK') && pfOut.text().includes('nginx'),
  pfOut.text().slice(0, 200));

const log = await v1.readNamespacedPodLog({ name: 'web', namespace: 'default' });
check('logs', typeof log === 'string' && log.length > 0, log);

const patched = await v1.patchNamespacedPod(
  { name: 'sh', namespace: 'default', body: { metadata: { labels: { checked: 'yes' } } } },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
);
check('patch', patched.metadata.labels.checked === 'yes', patched.metadata.labels);

const svc = await v1.createNamespacedService({
  namespace: 'default',
  body: { metadata: { name: 'js' }, spec: { ports: [{ port: 80 }], selector: { run: 'web' } } },
});
check('service status', svc.status && svc.status.loadBalancer !== undefined, svc.status);
await v1.deleteNamespacedService({ name: 'js', namespace: 'default' });

// An informer (list, then watch from the list's resourceVersion) follows adds, updates and
// deletes of ConfigMaps with a label.
const seenByInformer = [];
const informer = k8s.makeInformer(
  kc,
  '/api/v1/namespaces/default/configmaps',
  () => v1.listNamespacedConfigMap({ namespace: 'default', labelSelector: 'js=yes' }),
  'js=yes',
);
for (const verb of ['add', 'update', 'delete']) {
  informer.on(verb, (obj) => seenByInformer.push(`${verb} ${obj.metadata.name}`));
}
await informer.start();
await v1.createNamespacedConfigMap({
  namespace: 'default', body: { metadata: { name: 'js-cm', labels: { js: 'yes' } }, data: { a: '1' } },
});
await until('informer add', () => seenByInformer.includes('add js-cm'));
await v1.patchNamespacedConfigMap(
  { name: 'js-cm', namespace: 'default', body: { data: { a: '2' } } },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
);
await until('informer update', () => seenByInformer.includes('update js-cm'));
check('informer cache', informer.get('js-cm', 'default')?.data?.a === '2', informer.list());
await v1.deleteNamespacedConfigMap({ name: 'js-cm', namespace: 'default' });
await until('informer delete', () => seenByInformer.includes('delete js-cm'));
await informer.stop();
check('informer', JSON.stringify(seenByInformer) === '["add js-cm","update js-cm","delete js-cm"]', seenByInformer);

// Paging with limit and _continue.
for (let i = 0; i < 5; i++) {
  await v1.createNamespacedConfigMap({
    namespace: 'default', body: { metadata: { name: `jspage-${i}`, labels: { jspaged: 'yes' } } },
  });
}
const paged = [];
let token;
let pages = 0;
do {
  const page = await v1.listNamespacedConfigMap({
    namespace: 'default', labelSelector: 'jspaged=yes', limit: 2, _continue: token,
  });
  paged.push(...page.items.map((c) => c.metadata.name));
  token = page.metadata._continue;
  pages += 1;
} while (token);
check('paging', paged.join() === 'jspage-0,jspage-1,jspage-2,jspage-3,jspage-4' && pages === 3, [paged, pages]);

// Server-side apply.
const applied = await v1.patchNamespacedConfigMap(
  {
    name: 'jsapplied', namespace: 'default', fieldManager: 'js-apply', force: true,
    body: { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'jsapplied' }, data: { k: 'v' } },
  },
  k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.ServerSideApply),
);
check('server-side apply', applied.data.k === 'v'
  && applied.metadata.managedFields.some((m) => m.manager === 'js-apply' && m.operation === 'Apply'),
applied.metadata.managedFields);

try {
  await v1.readNamespacedPod({ name: 'nope', namespace: 'default' });
  check('404', false, 'no error');
} catch (e) {
  const body = typeof e.body === 'string' ? JSON.parse(e.body) : e.body;
  check('404', e.code === 404 && body.reason === 'NotFound', [e.code, e.body]);
}

console.log('all ok');
process.exit(0);
