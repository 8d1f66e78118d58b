# hostedtrain: `make demo` runs the main job on a local stack; `make test` runs every test.
# Both install what they need on a fresh Debian machine with Go.

GO      ?= go
BIN     := bin
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# apt waits up to five minutes for another apt (unattended upgrades on a fresh machine) to
# let go of the dpkg lock, instead of failing at once
APT_UPDATE  := $(SUDO) apt-get -o DPkg::Lock::Timeout=300 update -qq
APT_INSTALL := $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install
# Python tools go where python3's own pip puts them, or, where the system's Python refuses
# (Debian 12: an externally managed environment), into the project's virtual environment
# bin/pytools, which sees what the system already has; it is first on PATH for every recipe
# (and the tests they run), so python3 there is the one that has them.
PYTOOLS := $(CURDIR)/bin/pytools
PYDANTIC := pydantic>=2,<3
export PATH := $(PYTOOLS)/bin:$(PATH)
pip_install = python3 -m pip install --quiet $(1) 2>/dev/null || { \
  { [ -x $(PYTOOLS)/bin/python3 ] || python3 -m venv --system-site-packages $(PYTOOLS) 2>/dev/null || \
    { $(APT_UPDATE) && $(APT_INSTALL) -y -qq --no-install-recommends python3-venv >/dev/null && \
      python3 -m venv --system-site-packages $(PYTOOLS); }; } && \
  echo "(into $(PYTOOLS): this python3 refuses pip)" && $(PYTOOLS)/bin/python3 -m pip install --quiet $(1); }
# npm, from Debian's nodejs and npm (Node 18 on Debian 12) where the machine has none
NEED_NPM    := command -v npm >/dev/null 2>&1 || { echo "installing nodejs and npm with apt-get"; \
  $(APT_UPDATE) && $(APT_INSTALL) -y -qq --no-install-recommends nodejs npm >/dev/null; } && \
  command -v npm >/dev/null 2>&1 || { echo "npm is needed (Node 18 or later)"; exit 1; }
GOBIN   := $(shell $(GO) env GOPATH)/bin
STATICCHECK_VERSION := v0.8.2
VERSITYGW_VERSION   := v1.8.0

.PHONY: redteam all build lambda deploy-check osls cfn-lint demo test deps redis-server spec-validator versitygw awscli moto webhook-receiver web chromium lint fmt clean fuzz conformance pydantic prime-client sandbox bench-smoke bench-metrics bench-jobs bench-queue bench-fleet bench-cluster bench-agent bench-lambda bench-estimate bench-inference load chaos

all: build

## build: the CLI (hostedtrain), the agent (gpuagent) and the emulated pipeline into bin/
build:
	@echo "building bin/hostedtrain, bin/gpuagent and bin/prime-rl-emulator (a first build downloads the modules and compiles them: a few minutes)"
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./cmd/...

## lambda: one zip per folder of functions/, each holding the function's `bootstrap` for the
## provided.al2023 runtime on arm64 (static: CGO off; no RPC shim: the lambda.norpc tag)
LAMBDA_DIR := dist/lambda
FUNCTIONS  := $(notdir $(wildcard functions/*))
FUNCTIONS  := $(filter-out internal,$(FUNCTIONS))
lambda:
	@rm -rf $(LAMBDA_DIR) && mkdir -p $(LAMBDA_DIR)
	@$(GO) build -o $(LAMBDA_DIR)/.lambdazip ./scripts/lambdazip
	@for f in $(FUNCTIONS); do \
	  mkdir -p $(LAMBDA_DIR)/$$f && \
	  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w -buildid=' \
	    -o $(LAMBDA_DIR)/$$f/bootstrap ./functions/$$f || exit 1; \
	  $(LAMBDA_DIR)/.lambdazip $(LAMBDA_DIR)/$$f.zip $(LAMBDA_DIR)/$$f/bootstrap || exit 1; \
	  echo "$(LAMBDA_DIR)/$$f.zip  $$(du -h $(LAMBDA_DIR)/$$f/bootstrap | cut -f1) bootstrap"; \
	done
	@rm -f $(LAMBDA_DIR)/.lambdazip

## deploy-check: package serverless.yml offline with osls (the maintained Serverless Framework
## v3, pinned in deploy/package.json) and lint the CloudFormation it makes and every template in
## infra/ with cfn-lint. Errors fail; on the generated template the W3005 warnings (redundant
## DependsOn that the framework itself writes) are not ours to fix and are ignored.
deploy-check: lambda osls cfn-lint
	@rm -rf .serverless
	HOME=$(CURDIR)/.serverless-home SLS_TELEMETRY_DISABLED=1 SLS_NOTIFICATIONS_MODE=off \
	  deploy/node_modules/.bin/osls package --stage ci --region eu-west-1
	cfn-lint --ignore-checks W3005 -- .serverless/cloudformation-template-update-stack.json
	cfn-lint -- infra/*.yml

## osls: the Serverless Framework v3 fork, from npm, as deploy/package-lock.json pins it
osls:
	@test -x deploy/node_modules/.bin/osls || { \
	  $(NEED_NPM); \
	  echo "installing osls"; \
	  cd deploy && npm ci --silent --no-audit --no-fund; }

## cfn-lint: the CloudFormation linter
cfn-lint:
	@command -v cfn-lint >/dev/null 2>&1 || { \
	  echo "installing cfn-lint"; \
	  $(call pip_install,cfn-lint) || \
	  { $(APT_UPDATE) && $(APT_INSTALL) -y -qq cfn-lint >/dev/null; }; }

## demo: start the local stack, run examples/quickstart.toml to COMPLETED, stop the stack
demo: redis-server sandbox build
	./scripts/demo.sh

## test: gofmt, go vet and staticcheck (lint); every test, against real redis-server processes,
## with the race detector, and the API's suite again on a Redis Cluster; a short run of each fuzz target (a count of executions; see fuzz
## below for why a count); bench/ built and run briefly (bench-smoke)
test: deps deploy-check
	@# The dashboard embeds what `make web` vendors from npm: it must be what is committed.
	@! git rev-parse --git-dir >/dev/null 2>&1 || git diff --quiet HEAD -- api/web/static/vendor || \
	  { echo "api/web/static/vendor differs from web/package-lock.json's packages: commit what make web wrote"; exit 1; }
	$(MAKE) --no-print-directory lint
	python3 -m openapi_spec_validator openapi/openapi.yaml
	$(GO) test -race -count=1 -timeout 20m ./...
	@# The API's whole suite again, each test on a private three-master Redis Cluster, where a
	@# job's own data is on another shard than the queue's indices (docs/design.md).
	HOSTEDTRAIN_TEST_REDIS=cluster $(GO) test -race -count=1 -timeout 10m ./api
	$(GO) test -run '^$$' -fuzz '^FuzzJobAdmission$$' -fuzztime 5000x ./api
	$(GO) test -run '^$$' -fuzz '^FuzzVerify$$' -fuzztime 20000x ./internal/auth
	$(GO) test -run '^$$' -fuzz '^FuzzCheckURL$$' -fuzztime 20000x ./internal/webhook
	$(MAKE) --no-print-directory bench-smoke

## fuzz: every fuzz target for at least FUZZ_SECONDS (default 60) each: the job decoder
## (TOML and JSON), the token verifier and the webhook target guard. Run as rounds of a fixed
## count until the time is spent, the corpus carrying over between rounds: with a duration, Go
## 1.26's fuzz coordinator can fail a target with a bare "context deadline exceeded" as the time
## runs out (golang/go#75804, fixed in 1.27).
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := FuzzJobAdmission:./api FuzzVerify:./internal/auth FuzzCheckURL:./internal/webhook
fuzz:
	@for t in $(FUZZ_TARGETS); do \
	  name=$${t%%:*}; pkg=$${t#*:}; end=$$(( $$(date +%s) + $(FUZZ_SECONDS) )); rounds=0; \
	  while [ $$(date +%s) -lt $$end ]; do \
	    $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime 20000x $$pkg >/tmp/hostedtrain-fuzz.log 2>&1 || { cat /tmp/hostedtrain-fuzz.log; exit 1; }; \
	    rounds=$$((rounds+1)); \
	  done; \
	  echo "fuzz: $$name ($$pkg): $$rounds rounds of 20000 executions in $(FUZZ_SECONDS)+ s, no failure"; \
	done

## bench-queue: hostedtrain's queue against asynq on one redis-server (its own module, bench/)
BENCH_QUEUE_ARGS ?= -n 20000 -c 16
bench-queue: redis-server
	cd bench && $(GO) run ./cmd/queuebench $(BENCH_QUEUE_ARGS)

## bench-cluster: 100,000 jobs on a three-master Redis Cluster: how their keys and memory spread
## over the shards, and Redis memory per queued and per ended job
bench-cluster: redis-server
	cd bench && $(GO) run ./cmd/queuebench -only cluster -cluster-jobs 100000

## bench-fleet: the queue pushed as a fleet pushes it (issue 16): submits with hundreds of
## agents waiting, claims among thousands of organizations at their limit, queue positions with
## thousands of agents known, an agent's death to its job queued again at 10,000 running; then
## cache-aware placement against first-fit on a simulated fleet of 50 nodes (issue 33)
bench-fleet: redis-server
	cd bench && $(GO) run ./cmd/queuebench -only fleet && $(GO) run ./cmd/queuebench -only placement

## bench-smoke: bench/ (its own module, beside asynq) vetted, tested and run for a few seconds
## on small numbers, so that a change that breaks it fails make test instead of rotting unseen
bench-smoke: redis-server
	cd bench && $(GO) vet ./... && $(GO) test -count=1 ./... && \
	  $(GO) run ./cmd/queuebench -n 200 -big 2000 -samples 50 -fleet smoke && \
	  $(GO) run ./cmd/queuebench -only cluster -cluster-jobs 300

## bench-agent: the GPU agent's figures (docs/performance.md): a 2 GiB checkpoint's upload
## against a plain PUT to the same S3 server; the emulated trainer's step time alone and during
## an upload (unpinned, then the trainer pinned to CPU 0 and the rest to CPU 1); the idle gap
## between one job's end and the next one's start
bench-agent: versitygw awscli
	$(GO) test -run '^$$' -bench BenchmarkCheckpointUpload -benchtime 3x ./gpuagent
	$(GO) test -run '^$$' -bench BenchmarkStepTimeDuringUpload -benchtime 1x ./gpuagent
	HOSTEDTRAIN_BENCH_TRAINER_CPU=0 taskset -c 1 $(GO) test -run '^$$' -bench BenchmarkStepTimeDuringUpload -benchtime 1x ./gpuagent
	$(GO) test -run '^$$' -bench BenchmarkJobToJobGap -benchtime 50x ./gpuagent

## bench-metrics: reading a run's metrics as GET /v1/jobs/{id}/metrics and progress do (every
## step, a window, one series, a limit of one, the newest 20 steps) from a local folder and
## from S3 (versitygw): 10,000 steps of narrow rows, 2,000 steps of prime-rl's real width, and
## 100,000 steps in order and with rows out of order, with the bytes and objects each fetches
bench-metrics: versitygw
	$(GO) test -run '^$$' -bench BenchmarkReadMetrics -benchtime 10x ./internal/jobdata

## bench-inference: the inference gateway (issue 32): streamed chat completions at 200 at once
## straight to the emulated vLLM and through the gateway and an agent's tunnel (the added
## latency), 1,000 concurrent streams through one gateway (none may be dropped), and a deploy's
## time from the call to DEPLOYED on hostedtrain dev
bench-inference: redis-server
	$(GO) test -run '^$$' -bench BenchmarkInference -benchtime 1x ./gateway
	$(GO) test -run '^$$' -bench BenchmarkDeployToDeployed -benchtime 1x ./cmd/hostedtrain

## bench-lambda: each function's cold start (process start to its first request for an event,
## spec and router built) and the size of its arm64 bootstrap
bench-lambda: redis-server
	$(GO) test -run '^$$' -bench BenchmarkColdStart -benchtime 50x ./functions/internal/initbench

## redteam: every attack of the red teams' reports (issues 14, 29), each as the attacker did it and
## as often (HOSTEDTRAIN_REDTEAM=1: make test runs the repeated ones a tenth as often), against
## the real bubblewrap, cgroups, redis-server and S3 server; CI runs it after make test
REDTEAM_TESTS := 'TOML|Bigger|Blocked|Seccomp|StayInItsNetwork|OnlyTheRunsSteps|KilledAgent|PastItsMemory|PastItsDisk|NodeCannotStart|ProxyConnections|HidesTheNodes|LimitsAreTheJobsShare|NodeCheck|Xid|Quarantined|SandboxLimits|RestartDuringADelete|StreamsAreCapped|WithinTheBudget|NodeHealth|InputsLeaveRedis|JobStoreBytes|BacklogIsBounded|Hostile|ReachesNothing'
redteam: deps
	HOSTEDTRAIN_REDTEAM=1 $(GO) test -count=1 -timeout 20m -run $(REDTEAM_TESTS) ./internal/jobspec ./internal/webhook ./gpuagent ./gpuagent/sandbox ./api ./queue ./webhooks

## chaos: 1,000 emulated jobs through the HTTP API while agents are SIGKILLed (120 times),
## the API process is restarted once and redis-server twice; checks nothing is lost, run twice
## or written with a stale lease, and that resumed runs start from their newest checkpoint; three
## deployments streamed from throughout: no stream may hang, every deployment must come back
CHAOS_ARGS ?= -jobs 1000 -agents 8 -kills 120
chaos: build redis-server
	CGO_ENABLED=0 $(GO) build -o $(BIN)/chaos ./scripts/chaos
	$(BIN)/chaos -bin $(BIN) $(CHAOS_ARGS)

## load: 10,000 job submissions over HTTP at concurrency 64 with 200 emulated agents claiming,
## against the same requests to a minimal net/http handler that writes one Redis key (the floor)
LOAD_ARGS ?= -n 10000 -c 64 -agents 200
load: redis-server
	$(GO) run ./scripts/loadtest $(LOAD_ARGS)

## bench-estimate: the dry run's estimate against what the runs then took, over a simulated
## mix of 240 jobs of three shapes in one organization (the queue's clock): relative error of
## the expected duration (p50, p90), how often the run fell within low..high, and the floor
## set by the runs' own variation (an oracle that knows each shape's start-up and median step)
bench-estimate: redis-server
	$(GO) test -run '^$$' -bench BenchmarkEstimateError -benchtime 1x ./api

## bench-jobs: decode + validate + normalize of every fixture, on one core; the costliest files
## admission reads (the largest it accepts, and one at the TOML key limit) and the TOML parse of
## the latter alone
bench-jobs:
	$(GO) test -run '^$$' -bench 'BenchmarkJobAdmission|BenchmarkLargestAdmission' -benchmem -cpu 1 -count 5 ./api
	$(GO) test -run '^$$' -bench BenchmarkDecodeLargestTOML -benchmem -cpu 1 -count 5 ./internal/jobspec

deps: redis-server sandbox spec-validator versitygw awscli moto pydantic prime-client webhook-receiver web chromium

## web: the dashboard's vendored libraries (uPlot, Redoc) copied from npm into api/web, where
## the API embeds them; and playwright-core for the browser test
WEB_VENDOR := api/web/static/vendor
web:
	@test -d web/node_modules/uplot -a -d web/node_modules/redoc -a -d web/node_modules/playwright-core || { \
	  $(NEED_NPM); \
	  echo "installing the dashboard's npm packages"; \
	  cd web && npm ci --silent --no-audit --no-fund; }
	@mkdir -p $(WEB_VENDOR)
	@cp web/node_modules/uplot/dist/uPlot.iife.min.js web/node_modules/uplot/dist/uPlot.min.css $(WEB_VENDOR)/
	@# The docs work offline: the one thing Redoc fetches from elsewhere, the logo of its
	@# "API docs by Redocly" link, is replaced by an empty image.
	@sed 's#https://cdn.redoc.ly/redoc/logo-mini.svg#data:image/svg+xml,%3Csvg xmlns=%22http://www.w3.org/2000/svg%22/%3E#' \
	  web/node_modules/redoc/bundles/redoc.standalone.js > $(WEB_VENDOR)/redoc.standalone.js
	@cp web/node_modules/uplot/LICENSE $(WEB_VENDOR)/uPlot.LICENSE
	@cp web/node_modules/redoc/LICENSE $(WEB_VENDOR)/redoc.LICENSE
	@cp web/node_modules/redoc/bundles/redoc.standalone.js.LICENSE.txt $(WEB_VENDOR)/redoc.standalone.js.LICENSE.txt

## chromium: Debian's, for the dashboard's browser test (playwright-core drives it)
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium with apt-get"; \
	  $(APT_UPDATE) && \
	  $(APT_INSTALL) -y -qq --no-install-recommends chromium >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "chromium is still missing"; exit 1; }

## webhook-receiver: the standardwebhooks npm package the end-to-end webhook test verifies with
webhook-receiver:
	@test -d testdata/webhook-receiver/node_modules/standardwebhooks || { \
	  $(NEED_NPM); \
	  echo "installing the webhook receiver's npm packages"; \
	  cd testdata/webhook-receiver && npm ci --silent --no-audit --no-fund; }

## moto: the AWS emulator (python3 -m moto.server) the STS and Secrets Manager tests run against
moto:
	@python3 -c 'import moto.server' 2>/dev/null || { \
	  echo "installing moto"; \
	  $(call pip_install,'moto[server]') || \
	  { $(APT_UPDATE) && $(APT_INSTALL) -y -qq python3-moto python3-flask python3-flask-cors >/dev/null; }; }
	@python3 -c 'import moto.server' || { echo "moto is still missing"; exit 1; }

## awscli: a client that is not ours, to read back what the S3 backend wrote
awscli:
	@command -v aws >/dev/null 2>&1 || { \
	  echo "installing awscli"; \
	  $(call pip_install,awscli) || \
	  { $(APT_UPDATE) && $(APT_INSTALL) -y -qq awscli >/dev/null; }; }

## versitygw: the S3-compatible server the object-storage tests run against
versitygw:
	@command -v versitygw >/dev/null 2>&1 || test -x $(GOBIN)/versitygw || { \
	  echo "installing versitygw $(VERSITYGW_VERSION) with go install"; \
	  $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }

redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server with apt-get"; \
	  $(APT_UPDATE) && \
	  $(APT_INSTALL) -y -qq --no-install-recommends redis-server >/dev/null; }
	@command -v redis-server >/dev/null 2>&1 || { echo "redis-server is still missing"; exit 1; }

## sandbox: bubblewrap (Debian's bubblewrap) and util-linux's setpriv, which the GPU agent runs
## every job process in (gpuagent/sandbox); the isolation tests run the real ones
sandbox:
	@command -v bwrap >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 || { \
	  echo "installing bubblewrap with apt-get"; \
	  $(APT_UPDATE) && \
	  $(APT_INSTALL) -y -qq --no-install-recommends bubblewrap util-linux python3 >/dev/null; }
	@command -v bwrap >/dev/null 2>&1 && command -v setpriv >/dev/null 2>&1 || { echo "bwrap or setpriv is still missing"; exit 1; }

## pydantic: python3 (3.11+) with pydantic 2, what the upstream conformance kit's check.py
## (../shared/upstream) needs to validate files with prime-rl's and verifiers' own config code.
## Debian 12's python3-pydantic is 1.x, so pip comes first.
pydantic:
	@command -v python3 >/dev/null 2>&1 || { \
	  echo "installing python3 with apt-get"; \
	  $(APT_UPDATE) && $(APT_INSTALL) -y -qq python3 python3-pip python3-venv >/dev/null; }
	@python3 -c 'import sys, pydantic; sys.exit(0 if sys.version_info >= (3, 11) and pydantic.VERSION.startswith("2") else 1)' 2>/dev/null || { \
	  echo "installing pydantic 2"; \
	  $(call pip_install,'$(PYDANTIC)'); }
	@python3 -c 'import sys, pydantic; sys.exit(0 if sys.version_info >= (3, 11) and pydantic.VERSION.startswith("2") else 1)' || { \
	  echo "the upstream kit needs python3 3.11+ with pydantic 2 (pip install 'pydantic>=2,<3')"; exit 1; }

## prime-client: Debian's httpx, the HTTP library of the prime CLI's API client, which the test of
## the Prime-compatible surface runs from the upstream kit (cmd/hostedtrain/testdata/prime_client.py)
prime-client: pydantic
	@python3 -c 'import sys; sys.path.append("/usr/lib/python3/dist-packages"); import httpx' 2>/dev/null || { \
	  echo "installing python3-httpx with apt-get"; \
	  $(APT_UPDATE) && $(APT_INSTALL) -y -qq --no-install-recommends python3-httpx >/dev/null; }

## conformance: every job the service accepts (testdata/jobs and upstream's own `prime train`
## files), rendered as the agent writes it on 1, 2 and 8 GPUs, fresh and resuming, checked by
## the pinned upstream code in ../shared/upstream (check.py); prints what upstream accepted
conformance: pydantic
	@$(GO) test -run '^TestConformance$$' -count=1 -v ./gpuagent/render > /tmp/hostedtrain-conformance.log 2>&1; rc=$$?; \
	  grep '^conformance:' /tmp/hostedtrain-conformance.log; \
	  [ $$rc = 0 ] || { cat /tmp/hostedtrain-conformance.log; exit $$rc; }

spec-validator:
	@python3 -c 'import openapi_spec_validator' 2>/dev/null || { \
	  echo "installing openapi-spec-validator"; \
	  $(call pip_install,openapi-spec-validator) || \
	  { $(APT_UPDATE) && $(APT_INSTALL) -y -qq python3-openapi-spec-validator >/dev/null; }; }

## lint: gofmt, go vet and staticcheck
lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt would change the files above"; exit 1; }
	$(GO) vet ./...
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...

fmt:
	gofmt -w .

clean:
	rm -rf $(BIN)
