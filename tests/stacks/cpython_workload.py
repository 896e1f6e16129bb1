# A small CPython workload for the stacks tests (memtrack-cli/tests/stacks_vs_dhat.rs):
# a dict of 10,000 strings and a list comprehension over it, run by /usr/bin/python3.11
# under `memtrack run --stacks`.
d = {str(i): "value-%d" % i for i in range(10000)}
lengths = [len(k) + len(v) for k, v in d.items()]
print(len(d), sum(lengths))
