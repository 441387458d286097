"""Running a job's ranks on the two "hosts" bench/netns.sh makes: network namespaces troupe0
(10.77.0.1, its end of the veth troupe-a) and troupe1 (10.77.0.2, troupe-b) joined by a 1 Gbit/s
link. UCX goes over TCP; ranks of one host reach each other over its loopback."""
import os, subprocess

HOST_A, HOST_B = ("troupe0", "troupe-a"), ("troupe1", "troupe-b")


def on_hosts(cmd, hosts, port, env_extra, per_rank=False):
    """Runs `cmd` as one rank per entry of `hosts` (HOST_A or HOST_B), rank 0's host holding the
    rendezvous on `port`, with `env_extra` added to each rank's environment; returns their stdout
    joined, or with `per_rank` a list of each rank's."""
    master = "10.77.0.1" if hosts[0] == HOST_A else "10.77.0.2"
    procs = []
    for rank, (ns, dev) in enumerate(hosts):
        env = dict(os.environ, **env_extra, TROUPE_RANK=str(rank), TROUPE_WORLD_SIZE=str(len(hosts)), TROUPE_MASTER_ADDR=master,
                   TROUPE_MASTER_PORT=str(port), TROUPE_JOB_TOKEN="netns-bench", UCX_TLS="tcp,self", UCX_NET_DEVICES=dev)
        procs.append(subprocess.Popen(["ip", "netns", "exec", ns, *cmd], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True))
    outs = [p.communicate()[0] for p in procs]
    return outs if per_rank else "".join(outs)
