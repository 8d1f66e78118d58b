// The dashboard's browser test: Debian's chromium, driven by playwright-core, against a running
// API (the local stack). It pastes the token, finds the job in the table, opens it, waits for
// the charts, the events, the checkpoints with their links and the log tail, opens the API
// docs, and fails on any page error, console error or failed request. It saves screenshots.
//
// Then it opens an eval job and finds its result: the summary per environment.
//
// A forked job's page names the job and step it started from, linked.
//
// A failed job's page shows the failure's analysis: its class, whose fault, the evidence.
//
// With an admin token the nodes page lists the nodes: a cordoned one with its reason.
//
//   node dashboard.mjs URL TOKEN JOB_ID OUT_DIR EVAL_JOB_ID FORKED_JOB_ID FAILED_JOB_ID
import { chromium } from 'playwright-core';

const [url, token, jobID, out, evalID, forkedID, failedID] = process.argv.slice(2);
const fail = (msg) => { console.error('FAIL: ' + msg); process.exitCode = 1; };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const problems = [];
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1500 } });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  page.on('requestfailed', (r) => {
    // A stream the page closes itself when it leaves a job is not a failure.
    if (!(r.failure()?.errorText || '').includes('ERR_ABORTED')) problems.push('request failed: ' + r.url() + ' ' + r.failure()?.errorText);
  });
  const timeout = { timeout: 30000 };

  await page.goto(url + '/');
  await page.fill('#token', token);
  await page.click('#use-token');
  await page.waitForSelector(`#jobs tr[data-id="${jobID}"]`, timeout);
  if (page.url().includes(token)) fail('the token is in the URL');
  const stored = await page.evaluate(() => ({ session: sessionStorage.getItem('hostedtrain.token'), local: localStorage.length }));
  if (stored.session !== token || stored.local !== 0) fail('the token is not in sessionStorage alone: ' + JSON.stringify(stored));

  // The table's filters: COMPLETED keeps the job; FAILED hides it.
  await page.selectOption('#filter-status', 'FAILED');
  await page.waitForFunction((id) => !document.querySelector(`#jobs tr[data-id="${id}"]`), jobID, timeout);
  await page.selectOption('#filter-status', 'COMPLETED');
  await page.waitForSelector(`#jobs tr[data-id="${jobID}"]`, timeout);
  // The table's columns, a short id, sorting by a header, the text filter.
  const headers = await page.$$eval('#jobs th', (ths) => ths.map((t) => t.textContent));
  for (const h of ['Status', 'Job', 'Kind', 'Model', 'GPUs', 'Step', 'Duration', 'Cost', 'Age']) {
    if (!headers.includes(h)) fail('the jobs table lacks the column ' + h + ': ' + headers.join(', '));
  }
  const shown = await page.textContent(`#jobs tr[data-id="${jobID}"] a`);
  if (shown !== '…' + jobID.slice(-8)) fail('the job is not shown by a short id: ' + shown);
  await page.selectOption('#filter-status', '');
  await page.waitForSelector(`#jobs tr[data-id="${failedID}"]`, timeout);
  await page.click('#jobs th[data-col="Status"]');
  const order = await page.$$eval('#jobs tbody tr', (trs) => trs.map((tr) => tr.querySelector('.badge').textContent));
  if (order.join() !== [...order].sort().join()) fail('sorting by status: ' + order.join());
  await page.fill('#filter-text', jobID.slice(-8));
  await page.waitForFunction((id) => document.querySelectorAll('#jobs tbody tr').length === 1 && document.querySelector(`#jobs tr[data-id="${id}"]`), jobID, timeout);
  await page.fill('#filter-text', '');
  await page.selectOption('#filter-status', 'COMPLETED');
  await page.waitForFunction((id) => !document.querySelector(`#jobs tr[data-id="${id}"]`), failedID, timeout);
  await page.screenshot({ path: out + '/jobs.png', fullPage: true });

  await page.click(`#jobs tr[data-id="${jobID}"] a`);
  await page.waitForSelector('#charts .chart canvas', timeout);
  // Each chart has drawn, inside its own box.
  await page.waitForFunction(() => [...document.querySelectorAll('#charts .chart')].every((c) => c.querySelector('canvas')), null, timeout);
  const overflow = await page.$$eval('#charts .chart', (boxes) => boxes
    .filter((b) => b.querySelector('canvas').getBoundingClientRect().right > b.getBoundingClientRect().right + 1)
    .map((b) => b.dataset.metric));
  if (overflow.length) fail('charts spill out of their boxes: ' + overflow.join(', '));
  if ((await page.$$('#charts .chart')).length !== 3) fail('want 3 charts (reward, loss, entropy)');
  // No chart of a job with data is empty.
  await page.waitForFunction(() => [...document.querySelectorAll('#charts .chart')].every((c) => Number(c.dataset.points) > 0), null, timeout);
  await page.waitForFunction(() => document.querySelectorAll('#events li').length >= 5, null, timeout);
  await page.waitForSelector('#checkpoints a[href*="/v1/downloads/"], #checkpoints a[href^="http"]', timeout);
  await page.waitForFunction(() => document.querySelector('#logs').textContent.includes('training finished'), null, timeout);
  const facts = await page.textContent('#facts');
  if (!facts.includes('COMPLETED') && !(await page.textContent('#job-title')).includes('COMPLETED')) fail('the job page does not say COMPLETED');
  const events = await page.$$eval('#events li', (lis) => lis.map((li) => li.textContent));
  if (!events.some((e) => e.includes('job.completed'))) fail('the events lack job.completed: ' + events.join(' | '));
  // The best checkpoint is marked, with the rewards of its step.
  const bestRow = await page.textContent('#checkpoints tr.best');
  if (!bestRow.includes('best') || !/0\.\d{4}/.test(bestRow)) fail('the best checkpoint row: ' + bestRow);
  // A download link works without the token.
  const link = await page.getAttribute('#checkpoints a', 'href');
  const res = await page.request.get(link);
  if (res.status() !== 200 || (await res.body()).length === 0) fail(`the checkpoint link answered ${res.status()}`);
  // The rollouts: the newest step's histogram over its batch and its episodes; another step
  // picked shows that step's prompts; an episode opens to its prompt and completion.
  await page.waitForSelector('#rollouts details.sample', timeout);
  const histTitle = await page.textContent('#histogram-title');
  if (!/^rewards at step 20 over \d+ episodes/.test(histTitle)) fail('the histogram title: ' + histTitle);
  const binned = await page.$$eval('#histogram .bin', (bins) => bins.reduce((n, b) => n + Number(b.dataset.count), 0));
  const episodes = Number(histTitle.match(/over (\d+) episodes/)[1]);
  if (binned !== episodes || episodes === 0) fail(`the histogram's bins hold ${binned} of ${episodes} episodes`);
  const tallest = await page.$$eval('#histogram .bin .fill', (fills) => Math.max(...fills.map((f) => f.getBoundingClientRect().height)));
  if (tallest < 50) fail('the histogram draws no bars: tallest ' + tallest + 'px');
  await page.selectOption('#rollout-step', '3');
  await page.waitForFunction(() => document.querySelector('#histogram-title').textContent.includes('at step 3 '), null, timeout);
  await page.click('#samples details.sample summary');
  const opened = await page.textContent('#samples details.sample[open]');
  if (!opened.includes('Step 3, example') || !opened.includes('completion') || !opened.includes('boxed')) fail('an opened episode of step 3: ' + opened.slice(0, 300));
  await page.selectOption('#rollout-type', 'advantages');
  await page.waitForFunction(() => document.querySelector('#histogram-title').textContent.startsWith('advantages at step 3'), null, timeout);
  await page.locator('#rollouts').screenshot({ path: out + '/rollouts.png' });

  await page.selectOption('#log-component', 'agent');
  await page.waitForFunction(() => document.querySelector('#logs').textContent.includes('pipeline exited'), null, timeout);
  await page.screenshot({ path: out + '/job.png', fullPage: true });

  // An eval job shows its result: the environment, its size, the average reward.
  await page.goto(url + '/#/jobs/' + evalID);
  await page.waitForSelector('#eval-result tbody tr', timeout);
  const evalRow = await page.textContent('#eval-result tbody tr');
  if (!evalRow.includes('my-env') || !/0\.\d{4}/.test(evalRow)) fail('the eval result row: ' + evalRow);
  if ((await page.$$('#charts .chart')).length !== 0) fail('an eval job shows training charts');
  await page.screenshot({ path: out + '/eval.png', fullPage: true });

  await page.goto(url + '/#/jobs/' + forkedID);
  await page.waitForSelector('#lineage a', timeout);
  const lineage = await page.textContent('#lineage');
  const href = await page.getAttribute('#lineage a', 'href');
  if (href !== '#/jobs/' + jobID || !lineage.includes('at step 15')) fail(`the fork's lineage: ${lineage} (${href})`);

  await page.goto(url + '/#/jobs/' + failedID);
  await page.waitForSelector('#failure', timeout);
  const failure = await page.textContent('#failure');
  if (!failure.includes('environment install') || !failure.includes('user fault') || !failure.includes('not retried') ||
    !(await page.textContent('#failure pre.evidence')).includes('install.log: ')) fail('the failure analysis: ' + failure);
  if (await page.isVisible('#charts') || !(await page.isVisible('#no-metrics'))) fail('a job without metrics shows empty charts');
  let asked = '';
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await page.click('#delete');
  await page.waitForFunction(() => true, null, timeout);
  if (!asked.includes('cannot be undone')) fail('Delete did not ask first: ' + asked);
  if (!page.url().includes(failedID)) fail('a dismissed Delete left the page');
  const budget = await page.textContent('#budget');
  if (!budget.includes('of 5.00 GPU-hours used')) fail('the budget: ' + budget);
  await page.screenshot({ path: out + '/failed.png', fullPage: true });

  await page.goto(url + '/#/nodes');
  await page.waitForSelector('#nodes tr[data-node="gpu-node-9"][data-state="cordoned"]', timeout);
  await page.waitForSelector('#nodes tr[data-node="dev-agent-1"][data-state="ok"]', timeout);
  const cordoned = await page.textContent('#nodes tr[data-node="gpu-node-9"]');
  if (!cordoned.includes('fan noise')) fail('the cordoned node row: ' + cordoned);
  if (await page.isHidden('#nodes-link')) fail('an admin token does not see the Nodes link');
  await page.screenshot({ path: out + '/nodes.png', fullPage: true });

  // "Remember this token on this device": a new tab opens a job without asking; Forget clears it.
  const ctx2 = await browser.newContext({ viewport: { width: 390, height: 844 } });
  const phone = await ctx2.newPage();
  phone.on('pageerror', (e) => problems.push('page error (phone): ' + e.message));
  await phone.goto(url + '/');
  await phone.fill('#token', token);
  await phone.check('#remember');
  await phone.click('#use-token');
  await phone.waitForSelector(`#jobs tr[data-id="${jobID}"]`, timeout);
  const wide = await phone.evaluate(() => document.documentElement.scrollWidth);
  if (wide > 391) fail('the jobs page is wider than a phone: ' + wide + 'px');
  await phone.screenshot({ path: out + '/phone.png', fullPage: true });
  const tab = await ctx2.newPage();
  await tab.goto(url + '/#/jobs/' + jobID);
  await tab.waitForSelector('#facts dl', timeout);
  const tabWide = await tab.evaluate(() => document.documentElement.scrollWidth);
  if (tabWide > 391) fail('the job page is wider than a phone: ' + tabWide + 'px');
  await tab.click('#forget');
  await tab.waitForSelector('#token', timeout);
  const left = await tab.evaluate(() => localStorage.length + sessionStorage.length);
  if (left !== 0) fail('Forget token left ' + left + ' stored item(s)');
  await ctx2.close();

  await page.goto(url + '/docs');
  await page.waitForSelector('#redoc h1', timeout);
  const title = await page.textContent('#redoc h1');
  if (!title.toLowerCase().includes('hostedtrain')) fail('the API docs title: ' + title);
  await page.screenshot({ path: out + '/docs.png' });
} catch (e) {
  fail(e.message);
} finally {
  await browser.close();
}
for (const p of problems) fail(p);
if (!process.exitCode) console.log('dashboard ok');
