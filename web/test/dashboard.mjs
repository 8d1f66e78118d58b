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
// A job's charts: every headline series, a read-out of all of them on hover, smoothing, a log
// scale, any stored metric added from the picker; a job of two environments charts each. A GEPA
// job: its best score per candidate, the prompt copied, the Pareto frontier. Two runs compared.
//
// A running job's charts grow as it steps, and Stop (asked first) stops it.
//
// A checkpoint deployed from its job's page: the deployments page shows it DEPLOYED and its
// chat box streams an answer from it.
//
//   node dashboard.mjs URL TOKEN JOB_ID OUT_DIR EVAL_JOB_ID FORKED_JOB_ID FAILED_JOB_ID GEPA_JOB_ID MULTI_ENV_JOB_ID LIVE_JOB_ID
import { chromium } from 'playwright-core';

const [url, token, jobID, out, evalID, forkedID, failedID, gepaID, multiID, liveID] = process.argv.slice(2);
const fail = (msg) => { console.error('FAIL: ' + msg); process.exitCode = 1; };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
});
const problems = [];
let where = 'start'; // the part under test, named in a failure
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1500 } });
  page.on('pageerror', (e) => problems.push('page error: ' + e.message));
  page.on('console', (m) => { if (m.type() === 'error') problems.push('console error: ' + m.text()); });
  page.on('requestfailed', (r) => {
    // A stream the page closes itself when it leaves a job is not a failure.
    if (!(r.failure()?.errorText || '').includes('ERR_ABORTED')) problems.push('request failed: ' + r.url() + ' ' + r.failure()?.errorText);
  });
  const timeout = { timeout: 30000 };
  // Every request that would change a job: a dismissed confirmation must send none.
  const changes = [];
  page.on('request', (r) => { if (r.method() !== 'GET' && r.url().includes('/v1/jobs/')) changes.push(r.method() + ' ' + r.url()); });

  where = 'the jobs table';
  await page.goto(url + '/');
  await page.fill('#token', token);
  await page.click('#use-token');
  await page.waitForSelector(`#jobs tr[data-id="${jobID}"]`, timeout);
  if (page.url().includes(token)) fail('the token is in the URL');
  const stored = await page.evaluate(() => ({ session: sessionStorage.getItem('hostedtrain.token'), local: localStorage.length }));
  if (stored.session !== token || stored.local !== 0) fail('the token is not in sessionStorage alone: ' + JSON.stringify(stored));

  // More than a page of jobs: More adds the next page, and the table goes on refreshing every
  // page shown (the running job's step moves on; the older page stays).
  where = 'the jobs table\'s pages';
  await page.waitForSelector('#more-jobs', timeout);
  const rows = () => page.$$eval('#jobs tbody tr[data-id]', (trs) => trs.length);
  if (await rows() !== 50) fail('the first page shows ' + (await rows()) + ' jobs; want 50');
  await page.click('#more-jobs');
  await page.waitForFunction(() => document.querySelectorAll('#jobs tbody tr[data-id]').length > 50 && !document.querySelector('#more-jobs'), null, timeout);
  const stepCol = (await page.$$eval('#jobs th', (ths) => ths.map((t) => t.textContent))).indexOf('Step');
  const liveStep = () => page.$eval(`#jobs tr[data-id="${liveID}"]`, (tr, i) => tr.children[i].textContent, stepCol);
  const stepThen = await liveStep();
  await page.waitForFunction(([id, i, then]) => document.querySelectorAll('#jobs tbody tr[data-id]').length > 50 &&
    document.querySelector(`#jobs tr[data-id="${id}"]`)?.children[i].textContent !== then, [liveID, stepCol, stepThen], timeout);
  if (await rows() <= 50) fail('a refresh dropped the second page');

  where = 'the jobs table';
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
  // Its cost at the operator's price, and its kind.
  const row = await page.$$eval(`#jobs tr[data-id="${jobID}"] td`, (tds) => tds.map((td) => td.textContent));
  const col = (name) => row[headers.indexOf(name)];
  if (!/^\d+\.\d\d$/.test(col('Cost')) || col('Kind') !== 'rl' || col('GPUs') !== '2×H100') fail('the job row: ' + row.join(' | '));
  // The kind filter asks the API for one kind.
  await page.selectOption('#filter-status', '');
  await page.selectOption('#filter-kind', 'eval');
  await page.waitForFunction(() => [...document.querySelectorAll('#jobs tbody tr[data-id]')].length > 0 &&
    [...document.querySelectorAll('#jobs tbody tr[data-id]')].every((tr) => tr.children[3].textContent === 'eval'), null, timeout);
  await page.selectOption('#filter-kind', '');
  await page.selectOption('#filter-status', 'COMPLETED');
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

  where = 'the charts of a job';
  await page.click(`#jobs tr[data-id="${jobID}"] a`);
  await page.waitForSelector('#charts .chart canvas', timeout);
  // Each chart has drawn, inside its own box.
  await page.waitForFunction(() => [...document.querySelectorAll('#charts .chart')].every((c) => c.querySelector('canvas')), null, timeout);
  const overflow = await page.$$eval('#charts .chart', (boxes) => boxes
    .filter((b) => b.querySelector('canvas').getBoundingClientRect().right > b.getBoundingClientRect().right + 1)
    .map((b) => b.dataset.metric));
  if (overflow.length) fail('charts spill out of their boxes: ' + overflow.join(', '));
  // Every headline series the job stores is charted, headline order, none of them empty.
  const charted = await page.$$eval('#charts .chart', (cs) => cs.map((c) => c.dataset.metric));
  if (charted.join() !== 'reward,loss,entropy,kl,grad_norm,throughput,seq_len,lr') fail('the charts: ' + charted.join());
  await page.waitForFunction(() => [...document.querySelectorAll('#charts .chart')].every((c) => Number(c.dataset.points) > 0), null, timeout);
  where = 'hover';
  // Hovering one chart reads out every chart at that step: the read-out line and each
  // chart's legend (their cursors are one).
  const over = await page.locator('#charts .chart[data-metric="loss"] .u-over').boundingBox();
  await page.mouse.move(over.x + over.width / 2, over.y + over.height / 2);
  await page.waitForFunction(() => document.querySelector('#readout')?.dataset.step, null, timeout);
  const readout = await page.textContent('#readout');
  if (!/^step \d+ · Reward mean [\d.]+, p10 [\d.]+, p90 [\d.]+ · Loss [\d.]+ · Entropy [\d.]+ .* · Grad norm [\d.]+ .* · Learning rate [\d.e+-]+$/.test(readout)) fail('the read-out: ' + readout);
  const legends = await page.$$eval('#charts .chart', (cs) => cs.map((c) => c.querySelector('.u-legend .u-series:nth-child(2) .u-value').textContent));
  if (legends.some((v) => !/^-?\d[\d.]*(e[+-]?\d+)?$/.test(v))) fail('a chart does not read out the hovered step: ' + legends.join(' | '));
  where = 'smoothing, log scale, picker';
  // Smoothing changes what is drawn; a log scale draws every chart again; any stored metric
  // can be charted, from the picker, and removed.
  const rawLast = await page.getAttribute('#charts .chart[data-metric="reward"]', 'data-last');
  await page.fill('#smoothing', '0.9');
  await page.waitForFunction((raw) => document.querySelector('#charts .chart[data-metric="reward"]')?.dataset.last !== raw, rawLast, timeout);
  await page.check('#log-scale');
  await page.waitForFunction(() => document.querySelector('#charts .chart[data-metric="reward"]')?.dataset.scale === 'log', null, timeout);
  await page.waitForFunction(() => [...document.querySelectorAll('#charts .chart')].every((c) => Number(c.dataset.points) > 0), null, timeout);
  const groups = await page.$$eval('#metric-pick optgroup', (gs) => gs.map((g) => g.label));
  for (const g of ['headline', 'loss', 'optim', 'perf', 'train/agg', 'train/alphabet-sort']) if (!groups.includes(g)) fail('the metric picker lacks the group ' + g + ': ' + groups.join(', '));
  await page.selectOption('#metric-pick', 'perf/mfu');
  await page.click('#add-chart');
  await page.waitForFunction(() => Number(document.querySelector('#charts .chart[data-metric="perf/mfu"]')?.dataset.points) > 0, null, timeout);
  await page.locator('#charts').screenshot({ path: out + '/charts.png' });
  await page.click('#charts .chart[data-metric="perf/mfu"] .remove-chart');
  await page.waitForFunction(() => !document.querySelector('#charts .chart[data-metric="perf/mfu"]'), null, timeout);
  await page.uncheck('#log-scale');
  await page.fill('#smoothing', '0');
  await page.waitForFunction(() => document.querySelectorAll('#events li').length >= 5, null, timeout);
  await page.waitForSelector('#checkpoints a[href*="/v1/downloads/"], #checkpoints a[href^="http"]', timeout);
  await page.waitForFunction(() => document.querySelector('#logs').textContent.includes('training finished'), null, timeout);
  // Its start-up, phase by phase, to the first step.
  await page.waitForSelector('#startup .phase[data-phase="claim"]', timeout);
  await page.waitForSelector('#startup .phase[data-phase="first_step"]', timeout);
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
  where = 'rollouts';
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

  where = 'the eval page';
  // An eval job shows its result: the environment, its size, the average reward.
  await page.goto(url + '/#/jobs/' + evalID);
  await page.waitForSelector('#eval-result tbody tr', timeout);
  const evalRow = await page.textContent('#eval-result tbody tr');
  if (!evalRow.includes('my-env') || !/0\.\d{4}/.test(evalRow)) fail('the eval result row: ' + evalRow);
  if ((await page.$$('#charts .chart')).length !== 0 || await page.isVisible('#chart-tools')) fail('an eval job shows training charts');
  // Its distribution of rewards, every scored rollout in a bin.
  const evalBinned = await page.$$eval('#eval-dist .histogram[data-env="my-env"] .bin', (bins) => bins.reduce((n, b) => n + Number(b.dataset.count), 0));
  if (evalBinned !== 8) fail(`the eval's reward distribution holds ${evalBinned} of 8 rollouts`);
  await page.screenshot({ path: out + '/eval.png', fullPage: true });

  where = 'the GEPA page';
  // A GEPA job: its best score per candidate charted, the best prompt copied with a click, the
  // Pareto frontier.
  await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: url });
  await page.goto(url + '/#/jobs/' + gepaID);
  await page.waitForFunction(() => Number(document.querySelector('#charts .chart[data-metric="gepa_best"]')?.dataset.points) > 1, null, timeout);
  await page.waitForSelector('#pareto tbody tr', timeout);
  const paretoRows = await page.$$eval('#pareto tbody tr', (trs) => trs.map((tr) => tr.textContent));
  if (paretoRows.length !== 8 || paretoRows.some((r) => !/^\d+[\d.]+\d+(, \d+)*$/.test(r))) fail('the Pareto frontier: ' + paretoRows.join(' | '));
  if (!(await page.textContent('#pareto-summary')).includes('of 8 validation rows')) fail('the Pareto summary: ' + await page.textContent('#pareto-summary'));
  await page.click('#copy-prompt');
  await page.waitForFunction(() => document.querySelector('#copied').textContent === 'copied', null, timeout);
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  if (!clip.includes('careful solver for my-env') || clip !== (await page.textContent('#best-prompt'))) fail('the copied prompt: ' + clip);
  if (await page.isVisible('#checkpoints table')) fail('a GEPA job lists checkpoints');
  await page.screenshot({ path: out + '/gepa.png', fullPage: true });

  where = 'two environments';
  // A job of two environments charts each one's reward beside the mean.
  await page.goto(url + '/#/jobs/' + multiID);
  await page.waitForFunction(() => Number(document.querySelector('#charts .chart[data-metric="reward"]')?.dataset.points) > 0, null, timeout);
  const rewardLegend = await page.textContent('#charts .chart[data-metric="reward"] .u-legend');
  if (!rewardLegend.includes('alphabet-sort') || !rewardLegend.includes('reverse-text')) fail('the reward chart of two environments: ' + rewardLegend);
  const envLines = (await page.getAttribute('#charts .chart[data-metric="reward"]', 'data-lines')).split(',').map(Number);
  if (envLines.length !== 5 || envLines.some((n) => n !== 20)) fail('the reward chart of two environments draws lines of ' + envLines.join(',') + ' points; want mean, p10, p90 and each environment, 20 each');

  where = 'compare';
  // Two runs compared: picked in the list, one metric overlaid, their configs side by side with
  // what differs marked.
  await page.goto(url + '/');
  await page.waitForSelector(`#jobs tr[data-id="${forkedID}"]`, timeout);
  if (!(await page.isDisabled('#compare'))) fail('Compare is enabled with no job picked');
  await page.check(`#jobs input.pick[data-id="${jobID}"]`);
  await page.check(`#jobs input.pick[data-id="${forkedID}"]`);
  await page.click('#compare');
  await page.waitForFunction(() => /^\d+,\d+$/.test(document.querySelector('#compare-chart')?.dataset.points || ''), null, timeout);
  const points = (await page.getAttribute('#compare-chart', 'data-points')).split(',').map(Number);
  if (points[0] !== 20 || points[1] < 1) fail('the compared rewards: ' + points.join(','));
  const differs = await page.$$eval('#compare-config tbody tr', (trs) => trs.map((tr) => tr.dataset.key + (tr.classList.contains('differs') ? '' : ' (same)')));
  for (const k of ['max_steps', 'warm_start.job']) if (!differs.includes(k)) fail(`the configs' differences lack ${k}: ${differs.join(', ')}`);
  if (differs.some((k) => k.endsWith('(same)'))) fail('"only what differs" shows rows that do not: ' + differs.join(', '));
  await page.uncheck('#only-differences');
  await page.waitForSelector('#compare-config tr[data-key="model"]:not(.differs)', timeout);
  await page.selectOption('#compare-metric', 'loss');
  await page.waitForFunction(() => document.querySelector('#compare-chart')?.dataset.metric === 'loss', null, timeout);
  await page.screenshot({ path: out + '/compare.png', fullPage: true });

  where = 'the fork';
  await page.goto(url + '/#/jobs/' + forkedID);
  await page.waitForSelector('#lineage a', timeout);
  const lineage = await page.textContent('#lineage');
  const href = await page.getAttribute('#lineage a', 'href');
  if (href !== '#/jobs/' + jobID || !lineage.includes('at step 15')) fail(`the fork's lineage: ${lineage} (${href})`);

  where = 'the failed job';
  await page.goto(url + '/#/jobs/' + failedID);
  await page.waitForSelector('#failure', timeout);
  const failure = await page.textContent('#failure');
  if (!failure.includes('environment install') || !failure.includes('user fault') || !failure.includes('not retried') ||
    !(await page.textContent('#failure pre.evidence')).includes('install.log: ')) fail('the failure analysis: ' + failure);
  if (await page.isVisible('#charts') || !(await page.isVisible('#no-metrics'))) fail('a job without metrics shows empty charts');
  let asked = '';
  changes.length = 0;
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await page.click('#delete');
  if (!asked.includes('cannot be undone')) fail('Delete did not ask first: ' + asked);
  page.once('dialog', (d) => { asked = d.message(); d.dismiss(); });
  await page.click('#restart');
  if (!asked.includes('Restart job') || !asked.includes('newest checkpoint')) fail('Restart did not ask first: ' + asked);
  // A request sent by a click would have been seen by now: the page's next look comes after it.
  await page.evaluate(() => fetch('/healthz'));
  if (changes.length) fail('a dismissed confirmation still sent ' + changes.join(', '));
  if (!page.url().includes(failedID)) fail('a dismissed Delete left the page');
  const budget = await page.textContent('#budget');
  if (!budget.includes('of 5.00 GPU-hours used')) fail('the budget: ' + budget);
  await page.screenshot({ path: out + '/failed.png', fullPage: true });

  where = 'nodes';
  await page.goto(url + '/#/nodes');
  await page.waitForSelector('#nodes tr[data-node="gpu-node-9"][data-state="cordoned"]', timeout);
  await page.waitForSelector('#nodes tr[data-node="dev-agent-1"][data-state="ok"]', timeout);
  const cordoned = await page.textContent('#nodes tr[data-node="gpu-node-9"]');
  if (!cordoned.includes('fan noise')) fail('the cordoned node row: ' + cordoned);
  if (await page.isHidden('#nodes-link')) fail('an admin token does not see the Nodes link');
  await page.screenshot({ path: out + '/nodes.png', fullPage: true });

  where = 'the phone';
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
  // The charts, the GEPA page and the compare page fit a phone too.
  await tab.waitForFunction(() => Number(document.querySelector('#charts .chart')?.dataset.points) > 0, null, timeout);
  for (const [hash, ready] of [['#/jobs/' + gepaID, '#pareto tbody tr'], ['#/compare/' + jobID + ',' + forkedID, '#compare-config tbody tr'], ['#/jobs/' + evalID, '#eval-dist .bin']]) {
    await tab.goto(url + '/' + hash);
    await tab.waitForSelector(ready, timeout);
    const w = await tab.evaluate(() => document.documentElement.scrollWidth);
    if (w > 391) fail(`${hash} is wider than a phone: ${w}px`);
  }
  await tab.screenshot({ path: out + '/phone-eval.png', fullPage: true });
  await tab.click('#forget');
  await tab.waitForSelector('#token', timeout);
  const left = await tab.evaluate(() => localStorage.length + sessionStorage.length);
  if (left !== 0) fail('Forget token left ' + left + ' stored item(s)');
  await ctx2.close();

  where = 'the running job';
  // A running job: its charts grow as it steps (the page reads what is new), and Stop asks
  // first, then stops it.
  await page.goto(url + '/#/jobs/' + liveID);
  await page.waitForFunction(() => Number(document.querySelector('#charts .chart[data-metric="loss"]')?.dataset.points) > 0, null, timeout);
  const before = Number(await page.getAttribute('#charts .chart[data-metric="loss"]', 'data-points'));
  await page.waitForFunction((n) => Number(document.querySelector('#charts .chart[data-metric="loss"]')?.dataset.points) > n + 5, before, timeout);
  const gaps = await page.$$eval('#charts .chart', (cs) => cs.map((c) => c.dataset.lines));
  page.once('dialog', (d) => { asked = d.message(); d.accept(); });
  await page.click('#stop');
  if (!asked.includes('Stop job')) fail('Stop did not ask first: ' + asked);
  await page.waitForFunction(() => document.querySelector('#job-title').textContent.includes('STOPPED'), null, { timeout: 60000 });
  // Once the run has stopped, the trainer's charts hold every step it trained: none lost a value
  // written after the orchestrator's part of its step was read.
  const trained = Number((await page.textContent('#facts')).match(/step(\d+)\//)[1]);
  await page.waitForFunction((n) => ['loss', 'entropy', 'grad_norm'].every((m) => Number(document.querySelector(`#charts .chart[data-metric="${m}"]`)?.dataset.points) === n), trained, timeout)
    .catch(() => fail(`the trainer's charts of the stopped run do not hold its ${trained} steps (while it ran: ${gaps.join(' | ')})`));

  where = 'deployments';
  // Deploy the best checkpoint from the job's page; the deployments page shows it DEPLOYED
  // (its node, requests) and its chat box streams an answer from it through the gateway.
  await page.goto(url + '/#/jobs/' + jobID);
  await page.waitForSelector('#checkpoints tr.best button.deploy', timeout);
  await page.click('#checkpoints tr.best button.deploy');
  await page.waitForFunction(() => location.hash === '#/deployments', null, timeout);
  await page.waitForSelector('#deployments tr[data-status="DEPLOYED"]', { timeout: 60000 });
  await page.waitForFunction(() => document.querySelector('#chat-model')?.options.length > 0, null, timeout);
  await page.fill('#chat-input', 'hello from the dashboard');
  await page.click('#chat-send');
  await page.waitForFunction(() => document.querySelector('#chat-answer')?.dataset.done === '1', null, timeout);
  const said = await page.textContent('#chat-answer');
  if (!said.includes('emulated answer of adapter') || !said.includes('hello from the dashboard')) fail('the chat box answered: ' + said);
  await page.waitForFunction(() => Number(document.querySelector('#deployments tr[data-status="DEPLOYED"] td:nth-child(6)')?.textContent) > 0, null, timeout);
  await page.screenshot({ path: out + '/deployments.png' });

  where = 'docs';
  await page.goto(url + '/docs');
  await page.waitForSelector('#redoc h1', timeout);
  const title = await page.textContent('#redoc h1');
  if (!title.toLowerCase().includes('hostedtrain')) fail('the API docs title: ' + title);
  await page.screenshot({ path: out + '/docs.png' });
} catch (e) {
  fail(where + ': ' + e.message);
} finally {
  await browser.close();
}
for (const p of problems) fail(p);
if (!process.exitCode) console.log('dashboard ok');
