#!/usr/bin/env python3
"""deploy/kubernetes/: every kustomization renders, its objects agree with each other and with
the binaries, and each one's shard pod command line starts a real shard that its probes find
live and ready.

Usage: kubernetes_test.py SOURCE_DIR BUILD_DIR
Exits 77 (skipped) without kubectl (its `kubectl kustomize` renders the manifests).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))
import free_port as free_ports  # noqa: E402

KUSTOMIZATIONS = ["base", "overlays/replicated", "overlays/large"]
problems = []


def check(condition, what):
    if not condition:
        problems.append(what)
    return condition


def free_port():
    return free_ports.free_port("127.0.0.1")


def render(source_dir, kustomization):
    path = os.path.join(source_dir, "deploy", "kubernetes", kustomization)
    out = subprocess.run(["kubectl", "kustomize", path], check=True, capture_output=True,
                         text=True, timeout=60).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"].startswith(name)]
    check(len(found) == 1, f"one {kind} {name}, found {len(found)}")
    return found[0] if found else None


def port_of(container, name):
    return next(p["containerPort"] for p in container["ports"] if p["name"] == name)


def expand(command, env):
    """The shell command as /bin/sh would run it: $VAR, "$VAR" and ${HOSTNAME##*-}."""
    if "HOSTNAME" in env:
        command = re.sub(r"\$\{HOSTNAME##\*-\}", env["HOSTNAME"].rsplit("-", 1)[1], command)
    command = re.sub(r'"\$([A-Z_]+)"', lambda m: shlex.quote(env.get(m.group(1), "")), command)
    # An unquoted $VAR splits into words, as the shell does.
    command = re.sub(r"\$([A-Z_]+)", lambda m: env.get(m.group(1), ""), command)
    words = shlex.split(command)
    assert words[0] == "exec"
    return words[1:]


def flag(words, name):
    for i, word in enumerate(words):
        if word == name:
            return words[i + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def replace_flag(words, name, value):
    out = list(words)
    for i, word in enumerate(out):
        if word == name:
            out[i + 1] = value
        elif word.startswith(name + "="):
            out[i] = f"{name}={value}"
    return out


def http_status(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def start_etcd(work):
    client, peer = free_port(), free_port()
    process = subprocess.Popen(
        ["etcd", "--name", "test", "--data-dir", os.path.join(work, "etcd"),
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"test=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, f"127.0.0.1:{client}"


def run_shard_pod(build_dir, work, statefulset, config, label):
    """Starts pod 0's command (ports and the token made local) and waits for its probes."""
    pod = statefulset["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = dict(config["data"], HOSTNAME=f"{statefulset['metadata']['name']}-0")
    words = expand(container["args"][0], env)
    check(words[0] == "/usr/local/bin/ps-server", f"{label}: the shard runs {words[0]}")
    words[0] = os.path.join(build_dir, "server", "ps-server")
    token = os.path.join(work, "token")
    with open(token, "w") as f:
        f.write("a-test-token-of-enough-length\n")
    words = replace_flag(words, "--host", "127.0.0.1")
    words = replace_flag(words, "--auth_token_file", token)
    etcd = None
    if flag(words, "--etcd"):
        etcd, endpoint = start_etcd(work)
        words = replace_flag(words, "--etcd", endpoint)
    log_path = os.path.join(work, f"shard-{label.replace('/', '-')}.log")
    try:
        # A free port found here may be taken by a test running beside this one before the
        # shard binds it: then the shard says so and exits, and it starts again on others.
        for _ in range(3):
            metrics = free_port()
            attempt = replace_flag(replace_flag(words, "--port", str(free_port())),
                                   "--metrics_port", str(metrics))
            with open(log_path, "w") as log:
                shard = subprocess.Popen(attempt + ["--lifetime_s", "60"], stdout=log,
                                         stderr=log)
            try:
                probes = {"readinessProbe": None, "livenessProbe": None}
                for probe in probes:
                    get = container[probe]["httpGet"]
                    check(get["port"] == "metrics", f"{label}: {probe} is not on the metrics port")
                    probes[probe] = f"http://127.0.0.1:{metrics}{get['path']}"
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and shard.poll() is None:
                    if all(http_status(url) == 200 for url in probes.values()):
                        break
                    time.sleep(0.1)
                ok = all(http_status(url) == 200 for url in probes.values())
            finally:
                shard.kill()
                shard.wait()
            with open(log_path) as log:
                output = log.read()
            if ok or "Address already in use" not in output:
                break
        if not check(ok, f"{label}: the shard's probes do not both answer 200 ({probes})"):
            problems.append(output[-3000:])
    finally:
        if etcd is not None:
            etcd.kill()
            etcd.wait()


def check_kustomization(source_dir, build_dir, work, label):
    docs = render(source_dir, label)
    statefulset = one(docs, "StatefulSet", "hetps-shard")
    service = one(docs, "Service", "hetps-shards")
    pdb = one(docs, "PodDisruptionBudget", "hetps-shards")
    job = one(docs, "Job", "hetps-worker")
    config = one(docs, "ConfigMap", "hetps-job")
    if None in (statefulset, service, pdb, job, config):
        return
    data = config["data"]
    shards = statefulset["spec"]["replicas"]
    pod = statefulset["spec"]["template"]
    shard = pod["spec"]["containers"][0]
    labels = pod["metadata"]["labels"]
    selector = statefulset["spec"]["selector"]["matchLabels"]

    # The pieces select the shard pods, and only them.
    check(selector.items() <= labels.items(), f"{label}: the StatefulSet selects no pod of its own")
    check(service["spec"]["selector"] == selector, f"{label}: the Service selects other pods")
    check(pdb["spec"]["selector"]["matchLabels"] == selector, f"{label}: the PDB selects other pods")
    check(service["spec"].get("clusterIP") == "None", f"{label}: the Service is not headless")
    check(statefulset["spec"]["serviceName"] == service["metadata"]["name"],
          f"{label}: the StatefulSet's serviceName is not the headless Service")
    check(pod["spec"]["nodeSelector"] == {"role": "ps-cpu"}, f"{label}: shards not on role: ps-cpu")
    worker_pod = job["spec"]["template"]["spec"]
    check(worker_pod["nodeSelector"] == {"role": "train-gpu"},
          f"{label}: workers not on role: train-gpu")

    # The job's shape agrees everywhere.
    check(int(data["HETPS_NUM_SHARDS"]) == shards,
          f"{label}: HETPS_NUM_SHARDS {data['HETPS_NUM_SHARDS']} but {shards} shard pods")
    ps_port = port_of(shard, "ps")
    expected = ",".join(f"{statefulset['metadata']['name']}-{i}.{service['metadata']['name']}:"
                        f"{ps_port}" for i in range(shards))
    check(data["HETPS_SERVERS"] == expected,
          f"{label}: HETPS_SERVERS is {data['HETPS_SERVERS']}, not {expected}")
    workers = int(data["HETPS_NUM_WORKERS"])
    check(job["spec"]["completions"] == workers and job["spec"]["parallelism"] == workers,
          f"{label}: the worker Job does not run HETPS_NUM_WORKERS={workers} ranks")
    check(job["spec"].get("completionMode") == "Indexed", f"{label}: ranks need an Indexed Job")

    # Ports and flags agree.
    env = dict(data, HOSTNAME=f"{statefulset['metadata']['name']}-0")
    words = expand(shard["args"][0], env)
    check(flag(words, "--port") == str(ps_port), f"{label}: --port is not the ps containerPort")
    check(flag(words, "--metrics_port") == str(port_of(shard, "metrics")),
          f"{label}: --metrics_port is not the metrics containerPort")
    # gRPC's second connection serves workers on the shard's own machine only (they share its
    # network namespace), which no worker pod does: no port for it.
    check(flag(words, "--grpc_bulk_port") == "-1",
          f"{label}: a shard pod opens gRPC's bulk port, which no other pod uses")
    check(flag(words, "--shard_index") == "0", f"{label}: pod 0 is not shard 0")
    service_ports = {p["name"]: p["port"] for p in service["spec"]["ports"]}
    check(service_ports == {"ps": ps_port, "metrics": port_of(shard, "metrics")},
          f"{label}: the Service's ports are not the shard's")
    annotations = pod["metadata"].get("annotations", {})
    check(annotations.get("prometheus.io/port") == str(port_of(shard, "metrics")),
          f"{label}: Prometheus would scrape another port")
    resources = shard["resources"]
    check(resources["requests"]["memory"] == resources["limits"]["memory"],
          f"{label}: a shard's memory limit differs from its request (the shard sizes its cap "
          f"from the limit)")
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    check(volumes["token"]["secret"]["secretName"] == "hetps-token",
          f"{label}: the token does not come from the hetps-token Secret")

    # The worker's command line parses (its flags are the example job's).
    worker = worker_pod["containers"][0]
    worker_env = dict(data, HETPS_RANK="0", HETPS_WORLD_SIZE=data["HETPS_NUM_WORKERS"])
    worker_words = expand(worker["args"][0], worker_env)
    check(worker_words[0] == "/usr/local/libexec/hetps/linear_regression",
          f"{label}: the worker runs {worker_words[0]}")
    worker_words[0] = os.path.join(build_dir, "worker", "examples", "linear_regression")
    parsed = subprocess.run(worker_words + ["--help"], capture_output=True, text=True, timeout=30)
    check(parsed.returncode == 0, f"{label}: the worker's flags do not parse: {parsed.stderr}")
    check(flag(worker_words, "--metrics_port") == str(port_of(worker, "metrics")),
          f"{label}: the worker's --metrics_port is not its metrics containerPort")

    run_shard_pod(build_dir, work, statefulset, config, label)


def main():
    source_dir, build_dir = sys.argv[1], sys.argv[2]
    if shutil.which("kubectl") is None:
        print("skipped: needs kubectl (kubectl kustomize renders the manifests)")
        return 77
    if shutil.which("etcd") is None:
        print("skipped: needs etcd (etcd-server) for the replicated overlay")
        return 77
    with tempfile.TemporaryDirectory() as work:
        for kustomization in KUSTOMIZATIONS:
            check_kustomization(source_dir, build_dir, work, kustomization)
    dockerfile = open(os.path.join(source_dir, "deploy", "docker", "Dockerfile")).read()
    check("deploy/install_deps.sh" in dockerfile, "the Dockerfile does not use install_deps.sh")
    for port in ("7000", "7001", "9400", "9401"):
        check(re.search(rf"EXPOSE .*\b{port}\b", dockerfile), f"the Dockerfile hides port {port}")
    for problem in problems:
        print("kubernetes:", problem)
    print(f"kubernetes: {len(KUSTOMIZATIONS)} kustomizations rendered and checked, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
