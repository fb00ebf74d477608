"""hetps.torch: train a PyTorch model with hetps, changing a few lines.

Server-side optimizer (the update runs on the shards; the workers only compute gradients):

    opt = hetps.torch.ServerOptimizer(model.named_parameters(), "adam", lr=1e-3)
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # each bucket's push starts as its gradients are final
        opt.step()                        # waits for the new weights and writes them in place

Sum-only, as Horovod and BytePS do (the shards sum the workers' gradients; the local torch
optimizer applies them):

    opt = hetps.torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                           model.named_parameters())

Both connect with hetps.options_from_env() (the environment hetps.run sets) unless given a
client, and start every worker from rank 0's initial weights. One backward per step: gradients
are sent as backward produces them, so gradient clipping or accumulation between backward and
step() would not reach the shards.
"""

import warnings

import torch

import hetps
from hetps.torch._exchange import Exchange

__all__ = ["ServerOptimizer", "DistributedOptimizer", "broadcast_parameters", "RULES"]

# torch.optim's defaults per rule (lr=None: required, as torch.optim.SGD requires it).
RULES = {
    "sgd": dict(lr=None, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                maximize=False),
    "adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 maximize=False),
    "adamw": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
                  maximize=False),
    "adagrad": dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                    eps=1e-10, maximize=False),
    "rmsprop": dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                    centered=False, maximize=False),
}

DEFAULT_BUCKET_BYTES = 1 << 20


def _slot_names(rule, group):
    """torch.optim's names of the state the shards keep for `rule`, in the shards' order."""
    if rule == "sgd":
        return ["momentum_buffer"] if group["momentum"] != 0 else []
    if rule in ("adam", "adamw"):
        return ["exp_avg", "exp_avg_sq"] + (["max_exp_avg_sq"] if group["amsgrad"] else [])
    if rule == "adagrad":
        return ["sum"]
    return (["square_avg"] + (["grad_avg"] if group["centered"] else []) +  # rmsprop
            (["momentum_buffer"] if group["momentum"] != 0 else []))


def _server_params(rule, group):
    """A param group's hyperparameters in the shards' names (betas -> beta1, beta2; booleans
    as 0 or 1)."""
    params = {}
    for name in RULES[rule]:
        value = group[name]
        if name == "betas":
            params["beta1"], params["beta2"] = float(value[0]), float(value[1])
        else:
            params[name] = float(value)
    return params


def _split_names(params, named_parameters):
    """The parameters, and their names by id: from model.named_parameters() passed as params,
    or from named_parameters."""
    params = list(params)
    if not params:
        raise ValueError("no parameters to optimize")
    if isinstance(params[0], tuple):  # model.named_parameters()
        named_parameters = params
        params = [p for _, p in params]
    return params, {id(p): name for name, p in (named_parameters or [])}


def _named_groups(param_groups, names):
    """Each param group's (name, parameter) list. Unnamed parameters are named by their place
    (param.<i>): every worker must pass the same parameters in the same order either way."""
    groups, index = [], 0
    for group in param_groups:
        named = []
        for p in group["params"]:
            named.append((names.get(id(p), f"param.{index}"), p))
            index += 1
        groups.append(named)
    return groups


class ServerOptimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer whose update runs on the hetps shards.

    rule: "sgd", "adam", "adamw", "adagrad" or "rmsprop", with torch.optim's hyperparameter
    names and defaults (lr, betas, eps, weight_decay, momentum, nesterov, amsgrad, ...), also
    per param group. LR schedulers work unchanged: a changed param_groups[i]["lr"] reaches the
    shards for the next step. client: a hetps.Client (default: one from options_from_env()).
    bucket_bytes: parameters smaller than this travel packed together.
    """

    def __init__(self, params, rule="sgd", client=None, bucket_bytes=DEFAULT_BUCKET_BYTES,
                 name_prefix="", named_parameters=None, **hyperparameters):
        if rule not in RULES:
            raise ValueError(f"rule is one of {sorted(RULES)}, not {rule!r}")
        unknown = set(hyperparameters) - set(RULES[rule])
        if unknown:
            raise TypeError(f"{rule} takes {sorted(RULES[rule])}, not {sorted(unknown)}")
        defaults = dict(RULES[rule], **hyperparameters)
        if defaults["lr"] is None:
            raise TypeError(f"{rule} needs lr")
        params, names = _split_names(params, named_parameters)
        super().__init__(params, defaults)
        self.rule = rule
        self._own_client = client is None
        self.client = client if client is not None else hetps.Client(hetps.options_from_env())
        groups = _named_groups(self.param_groups, names)
        self._exchange = Exchange(
            self.client, groups, "server",
            lambda g: (self.rule, _server_params(self.rule, self.param_groups[g])),
            bucket_bytes, name_prefix)
        self._exchange.declare(self.client.options.rank)
        self._exchange.install_hooks()

    @property
    def push_log(self):
        """(time.perf_counter(), bucket) of each push of the last step, in start order."""
        return list(self._exchange.push_log)

    @property
    def steps(self):
        """Steps applied so far (the shards' version of the weights)."""
        return self._exchange.step

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._exchange.hyperparameters_changed_late():
            warnings.warn("hyperparameters changed after this step's gradients were pushed: "
                          "they apply from the next step (change them before backward)")
        self._exchange.finish()
        return loss

    def state_dict(self):
        """torch.optim's layout, with the shards' state: per parameter "step" and the rule's
        slots under torch's names (adam: exp_avg, exp_avg_sq[, max_exp_avg_sq]; sgd:
        momentum_buffer; adagrad: sum; rmsprop: square_avg[, grad_avg][, momentum_buffer]),
        plus "hetps_step". Call it between steps (after step() returned)."""
        state = super().state_dict()
        index = {id(p): i for i, p in enumerate(self._parameters())}
        for p, version, slots in self._exchange.read_states():
            if version != self._exchange.step:
                raise hetps.Error(f"the shards are at step {version}, this worker at step "
                                  f"{self._exchange.step}: call state_dict() after step()")
            group = self.param_groups[self._exchange.group_of(p)]
            entry = {"step": torch.tensor(float(version))}
            entry.update(zip(_slot_names(self.rule, group), slots))
            state["state"][index[id(p)]] = entry
        state["hetps_step"] = self._exchange.step
        return state

    def load_state_dict(self, state_dict):
        """Restores the hyperparameters, and on the shards the optimizer state, the step and
        the weights: the parameters' current values, so load the model's state first. Every
        worker calls it (rank 0 writes, the others wait for it at a barrier), before backward."""
        if "hetps_step" not in state_dict:
            raise ValueError("not a ServerOptimizer state (no hetps_step)")
        step = int(state_dict["hetps_step"])
        saved = state_dict["state"]
        super().load_state_dict({k: v for k, v in state_dict.items() if k != "hetps_step"} |
                                {"state": {}})
        if self.client.options.rank == 0:
            index = {id(p): i for i, p in enumerate(self._parameters())}

            def slots_of(p):
                names = _slot_names(self.rule, self.param_groups[self._exchange.group_of(p)])
                entry = saved.get(index[id(p)], {})
                return [entry[name] if name in entry else torch.zeros_like(p) for name in names]

            with torch.no_grad():
                self._exchange.write_states(step, slots_of)
        self.client.barrier()
        self._exchange.restart_at(step)

    def _parameters(self):
        return [p for group in self.param_groups for p in group["params"]]

    def close(self):
        if self._own_client:
            self.client.shutdown()


class DistributedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer: the shards sum the workers' gradients (BSP), the sum (or
    average, `average=True`) goes back into each parameter's .grad, and the wrapped optimizer
    applies it. param_groups and state are the wrapped optimizer's own, so LR schedulers and
    state_dict() work as without hetps."""

    def __init__(self, optimizer, named_parameters=None, client=None, average=True,
                 bucket_bytes=DEFAULT_BUCKET_BYTES, name_prefix=""):
        self._optimizer = optimizer
        self.defaults = optimizer.defaults
        self.param_groups = optimizer.param_groups
        self.state = optimizer.state
        if hasattr(self, "_hook_for_profile"):  # what torch.optim.Optimizer.__init__ does
            self._hook_for_profile()
        self._own_client = client is None
        self.client = client if client is not None else hetps.Client(hetps.options_from_env())
        names = {id(p): name for name, p in (named_parameters or [])}
        groups = _named_groups(self.param_groups, names)
        self._exchange = Exchange(self.client, groups, "sum", lambda g: ("sum", {}),
                                  bucket_bytes, name_prefix, average=average)
        self._exchange.declare(self.client.options.rank)
        self._exchange.install_hooks()

    @property
    def push_log(self):
        return list(self._exchange.push_log)

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._exchange.finish()
        self._optimizer.step()
        return loss

    def zero_grad(self, set_to_none=False):
        self._optimizer.zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        return self._optimizer.state_dict()

    def load_state_dict(self, state_dict):
        self._optimizer.load_state_dict(state_dict)

    def close(self):
        if self._own_client:
            self.client.shutdown()


def broadcast_parameters(named_parameters, client=None, name_prefix="broadcast/"):
    """Gives every worker rank 0's values of the parameters (in place). Both optimizers do this
    when they start; this is for state outside them (e.g. buffers)."""
    own = client is None
    client = client if client is not None else hetps.Client(hetps.options_from_env())
    try:
        groups = [[(name, p) for name, p in named_parameters]]
        exchange = Exchange(client, groups, "sum", lambda g: ("sum", {}), DEFAULT_BUCKET_BYTES,
                            name_prefix)
        with torch.no_grad():
            exchange.declare(client.options.rank)
    finally:
        if own:
            client.shutdown()
