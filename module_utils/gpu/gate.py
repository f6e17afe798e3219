"""The driver gate: judge what module_utils/gpu/probe.py read from nvidia-smi (and the fabric manager's unit).

Pure: it runs nothing (the fabric manager's unit is read through a callable it is given, only when the fabric is
required). `evaluate_gate` returns {"status", "reasons", "found", "checks", "warnings"}; each check is
{"name", "status": passed|failed|warned|not_checked, "found"}. A value the driver does not report ("[N/A]",
"[Not Supported]", a field it does not know) makes its check not_checked with the reason, never passed.
"""

from ansible.module_utils.gpu.nvidia_smi import UNAVAILABLE, driver_major

PASSED, FAILED, WARNED, NOT_CHECKED = "passed", "failed", "warned", "not_checked"
CHECK_NAMES = ("nvidia_smi", "gpu_count", "compute_capability", "driver", "persistence_mode", "mig_mode",
               "ecc_mode", "ecc_uncorrected_errors", "retired_pages", "remapped_rows", "fabric",
               "fabric_manager_service")
REQUIRE_FABRIC = ("auto", "true", "false")
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"


def _check(name, status, found):
    return {"name": name, "status": status, "found": found}


def _gpu_names(indices):
    """"GPU0-GPU3, GPU5" for [0, 1, 2, 3, 5]: runs of three or more GPUs as a range."""
    indices = sorted(set(indices))
    runs = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    names = []
    for first, last in runs:
        if last - first >= 2:
            names.append("GPU%d-GPU%d" % (first, last))
        else:
            names.extend("GPU%d" % i for i in range(first, last + 1))
    return ", ".join(names)


def _health(gpu, field, unknown_fields):
    """(text, None) when the GPU reported a value for `field`; (None, why not) otherwise."""
    if field in unknown_fields:
        return None, "this driver does not know %s (%s)" % (field, unknown_fields[field])
    health = gpu.get("health") or {}
    if field not in health:
        return None, "%s was not queried" % field
    text = health[field]
    if text in UNAVAILABLE:
        return None, "nvidia-smi reports %s for %s" % (text or "nothing", field)
    return text, None


def _is(text, word):
    return text is not None and text.strip().lower() == word


def _per_gpu(name, gpus, judge, bad_status=FAILED):
    """One check over every GPU. judge(gpu) -> (verdict, text), verdict "bad"|"warn"|"na"|"ok".

    Status: bad_status when a GPU is bad, else warned when one warns, else not_checked when one could not be
    judged, else passed. Returns (check, problem): problem names the bad (or warning) GPUs and what they show.
    """
    if not gpus:
        return _check(name, NOT_CHECKED, "no GPU was read"), None
    groups = {"bad": [], "warn": [], "na": [], "ok": []}
    for gpu in gpus:
        verdict, text = judge(gpu)
        groups[verdict].append((gpu["index"], text))

    def say(items, prefix=""):
        texts = []
        for _, text in items:
            if text not in texts:
                texts.append(text)
        return "; ".join("%s%s: %s" % (prefix, _gpu_names(i for i, t in items if t == text), text) for text in texts)

    mixed = groups["bad"] or groups["warn"] or groups["ok"]
    parts = [say(groups["bad"]), say(groups["warn"]), say(groups["na"], "not checked on " if mixed else ""),
             say(groups["ok"])]
    found = "; ".join(p for p in parts if p)
    if groups["bad"]:
        return _check(name, bad_status, found), say(groups["bad"])
    if groups["warn"]:
        return _check(name, WARNED, found), say(groups["warn"])
    return _check(name, NOT_CHECKED if groups["na"] else PASSED, found), None


def _fabric_checks(gpus, unknown, links, require, read_fabric_manager_unit):
    """The fabric and fabric_manager_service checks: ([check, check], [reasons], [warnings])."""
    interconnect = links["interconnect"] if links else "unknown"
    if not gpus:
        return [_check("fabric", NOT_CHECKED, "no GPU was read"),
                _check("fabric_manager_service", NOT_CHECKED, "no GPU was read")], [], []
    rows = []
    for gpu in gpus:
        state, why = _health(gpu, "fabric.state", unknown)
        status, why_status = _health(gpu, "fabric.status", unknown)
        rows.append((gpu["index"], state, why, status, why_status))
    on_fabric = [r for r in rows if r[1] is not None]
    if require == "false":
        return [_check("fabric", NOT_CHECKED, "not required (require_fabric=false); %d of %d GPU(s) report a "
                       "fabric state; links: %s" % (len(on_fabric), len(rows), interconnect)),
                _check("fabric_manager_service", NOT_CHECKED, "not read: fabric not required")], [], []
    if require != "true" and not on_fabric:
        whys = []
        for row in rows:
            if row[2] not in whys:
                whys.append(row[2])
        found = ("not required: no GPU reports an NVSwitch fabric state (%s); links: %s"
                 % ("; ".join(whys), interconnect))
        warnings = []
        if interconnect == "nvlink":
            warnings.append("all %d GPU pairs are on NVLink but no GPU reports a fabric state, so the NVSwitch "
                            "fabric and nvidia-fabricmanager were not checked; on an NVSwitch system set "
                            "require_fabric=true" % links["pairs"])
        return [_check("fabric", NOT_CHECKED, found),
                _check("fabric_manager_service", NOT_CHECKED, "not read: fabric not required")], [], warnings
    why_needed = ("require_fabric=true" if require == "true" else
                  "%s report a fabric state; links: %s" % (_gpu_names(r[0] for r in on_fabric), interconnect))

    def judge(gpu):
        _, state, why, status, _ = next(r for r in rows if r[0] == gpu["index"])
        if state is None:
            return "bad", "no fabric state (%s)" % why
        shown = "fabric.state %s, fabric.status %s" % (
            state, (gpu.get("health") or {}).get("fabric.status", "not reported"))
        if _is(state, "completed") and _is(status, "success"):
            return "ok", shown
        return "bad", shown

    fabric, problem = _per_gpu("fabric", gpus, judge)
    fabric["found"] = "required (%s); %s" % (why_needed, fabric["found"])
    reasons = []
    if problem:
        reasons.append("NVSwitch fabric not ready (required: %s) on %s; the GPUs cannot be used until "
                       "nvidia-fabricmanager has registered them" % (why_needed, problem))
    ready = fabric["status"] == PASSED
    fm = read_fabric_manager_unit()
    unit = fm["unit"]
    if not fm["read"]:
        service = _check("fabric_manager_service", NOT_CHECKED, "not read: %s" % fm["error"])
        return [fabric, service], reasons, []
    shown = "%s: LoadState=%s ActiveState=%s SubState=%s" % (unit, fm["load_state"], fm["active_state"],
                                                             fm["sub_state"])
    warnings = []
    if fm["active_state"] == "active":
        service = _check("fabric_manager_service", PASSED, shown)
    elif fm["load_state"] == "not-found" and ready:
        # No such unit, yet every GPU is registered: the fabric manager runs outside systemd (a driver container).
        service = _check("fabric_manager_service", WARNED, shown + " (no such unit; every GPU's fabric is "
                         "Completed/Success, so the fabric manager runs outside systemd)")
        warnings.append("%s is not installed although the NVSwitch fabric is up: %s" % (unit, shown))
    else:
        # A unit that is there but not running fails even when the GPUs still read Completed: the fabric state
        # does not go back when the daemon dies, and the fabric manager is needed while the GPUs are in use.
        what = "not installed" if fm["load_state"] == "not-found" else "not running"
        service = _check("fabric_manager_service", FAILED, shown)
        reasons.append("%s is %s (%s) on a host whose GPUs need the NVSwitch fabric: install/start it (its version "
                       "must match the driver)" % (unit, what, shown))
    return [fabric, service], reasons, warnings


def evaluate_gate(gpus, smi_error, expected_count, expected_capability, min_driver, links=None,
                  unknown_fields=None, require_fabric="auto", require_persistence=True, allow_mig=False,
                  max_uncorrected_ecc=0, fabric_manager=None):
    """The driver gate: {"status": "pass"|"fail"|"skipped", "reasons", "found", "checks", "warnings"}.

    expected_count 0 means the host declares no GPU: the gate is "skipped" (never "pass"), says what was found
    anyway and lists every check as not_checked. Otherwise every check that fails adds a reason quoting what
    was found and naming the GPUs. Knobs: require_fabric auto (required when a GPU reports a fabric state) |
    true | false; require_persistence False turns persistence off into a warning; allow_mig True turns MIG
    into a warning; max_uncorrected_ecc = uncorrectable (volatile) ECC errors tolerated per GPU.
    fabric_manager: callable returning read_fabric_manager()'s dict, called only when the fabric is required.
    """
    if require_fabric not in REQUIRE_FABRIC:
        raise ValueError("require_fabric must be one of %s, got %r" % ("|".join(REQUIRE_FABRIC), require_fabric))
    if max_uncorrected_ecc < 0:
        raise ValueError("max_uncorrected_ecc must be >= 0, got %r" % max_uncorrected_ecc)
    unknown = unknown_fields or {}
    drivers = sorted({g["driver_version"] for g in gpus if g["driver_version"]})
    caps = sorted({g["compute_capability"] for g in gpus if g["compute_capability"]})
    names = sorted({g["name"] for g in gpus if g["name"]})
    if smi_error and not gpus:
        found = smi_error
    else:
        found = "%d GPU(s) %s, compute capability %s, driver %s" % (
            len(gpus), "/".join(names) or "?", "/".join(caps) or "?", "/".join(drivers) or "?")
    if not expected_count:
        reasons = ["host declares no GPU (expected count 0): driver gate NOT run; found: %s" % found]
        if gpus:
            reasons.append("note: the host does have GPUs although it declares none")
        checks = [_check(n, NOT_CHECKED, "driver gate not run: the host declares no GPU") for n in CHECK_NAMES]
        return {"status": "skipped", "reasons": reasons, "found": found, "checks": checks, "warnings": []}
    reasons, checks, warnings = [], [], []

    def add(check, problem=None, reason=None):
        checks.append(check)
        if check["status"] == FAILED:
            reasons.append(reason or "%s: %s" % (check["name"], problem or check["found"]))
        elif check["status"] == WARNED:
            warnings.append(reason or "%s: %s" % (check["name"], problem or check["found"]))

    if smi_error:
        add(_check("nvidia_smi", FAILED, smi_error), reason="nvidia-smi: %s" % smi_error)
    else:
        text = "read %d GPU(s)" % len(gpus)
        if unknown:
            text += "; fields this driver does not know: %s" % ", ".join(sorted(unknown))
        add(_check("nvidia_smi", PASSED, text))
    if len(gpus) != expected_count:
        text = "expected %d GPU(s), found %d" % (expected_count, len(gpus))
        add(_check("gpu_count", FAILED, text), reason=text)
    else:
        add(_check("gpu_count", PASSED, "%d GPU(s)" % len(gpus)))
    if not expected_capability:
        add(_check("compute_capability", NOT_CHECKED, "no capability asked for; found %s" % ("/".join(caps) or "?")))
    else:
        wrong = ["GPU%d=%s" % (g["index"], g["compute_capability"]) for g in gpus
                 if g["compute_capability"] != expected_capability]
        if wrong:
            text = "expected compute capability %s on every GPU, found %s" % (expected_capability, ", ".join(wrong))
            add(_check("compute_capability", FAILED, text), reason=text)
        elif gpus:
            add(_check("compute_capability", PASSED, "%s on every GPU" % expected_capability))
        else:
            add(_check("compute_capability", NOT_CHECKED, "no GPU was read"))
    if not min_driver:
        add(_check("driver", NOT_CHECKED, "no minimum driver asked for; found %s" % ("/".join(drivers) or "?")))
    else:
        low = ["GPU%d=%s" % (g["index"], g["driver_version"]) for g in gpus
               if (driver_major(g["driver_version"]) or 0) < min_driver]
        if low:
            text = "expected driver >= %d, found %s" % (min_driver, ", ".join(low))
            add(_check("driver", FAILED, text), reason=text)
        elif gpus:
            add(_check("driver", PASSED, "%s >= %d" % ("/".join(drivers), min_driver)))
        else:
            add(_check("driver", NOT_CHECKED, "no GPU was read"))

    def persistence(gpu):
        text, why = _health(gpu, "persistence_mode", unknown)
        if text is None:
            return "na", why
        if _is(text, "enabled"):
            return "ok", "persistence mode Enabled"
        if _is(text, "disabled"):
            return "bad", "persistence mode Disabled"
        return "na", "unexpected persistence_mode %r" % text
    check, problem = _per_gpu("persistence_mode", gpus, persistence, FAILED if require_persistence else WARNED)
    add(check, reason=problem and "%s (enable it: nvidia-persistenced, or nvidia-smi -pm 1)%s" % (
        problem, "" if require_persistence else " [require_persistence=false]"))

    def mig(gpu):
        current, why_current = _health(gpu, "mig.mode.current", unknown)
        pending, why_pending = _health(gpu, "mig.mode.pending", unknown)
        on = ["%s Enabled" % k for k, v in (("current", current), ("pending", pending)) if _is(v, "enabled")]
        if on:
            return "bad", "MIG %s" % ", ".join(on)
        if current is None or pending is None:
            return "na", why_current or why_pending
        if _is(current, "disabled") and _is(pending, "disabled"):
            return "ok", "MIG Disabled"
        return "na", "unexpected MIG mode current %r pending %r" % (current, pending)
    check, problem = _per_gpu("mig_mode", gpus, mig, WARNED if allow_mig else FAILED)
    add(check, reason=problem and "%s: SGLang tensor parallelism needs whole GPUs (disable MIG: nvidia-smi "
        "-i N -mig 0, then reset the GPU)%s" % (problem, " [allow_mig=true]" if allow_mig else ""))

    def ecc_mode(gpu):
        text, why = _health(gpu, "ecc.mode.current", unknown)
        if text is None:
            return "na", why
        if _is(text, "enabled"):
            return "ok", "ECC Enabled"
        if _is(text, "disabled"):
            return "warn", "ECC Disabled (uncorrectable memory errors go uncounted)"
        return "na", "unexpected ecc.mode.current %r" % text
    add(*_per_gpu("ecc_mode", gpus, ecc_mode))

    def ecc_errors(gpu):
        volatile, why = _health(gpu, "ecc.errors.uncorrected.volatile.total", unknown)
        aggregate, _ = _health(gpu, "ecc.errors.uncorrected.aggregate.total", unknown)
        if volatile is None:
            if _is(_health(gpu, "ecc.mode.current", unknown)[0], "disabled"):
                why += " (ECC is Disabled)"
            return "na", why
        try:
            count = int(volatile)
        except ValueError:
            return "na", "unexpected ecc.errors.uncorrected.volatile.total %r" % volatile
        text = "%d uncorrectable ECC error(s) since the driver loaded (aggregate %s)" % (
            count, aggregate if aggregate is not None else "not reported")
        return ("bad" if count > max_uncorrected_ecc else "ok"), text
    check, problem = _per_gpu("ecc_uncorrected_errors", gpus, ecc_errors)
    add(check, reason=problem and "%s; at most %d allowed (max_uncorrected_ecc): drain the GPU, reset it and "
        "check nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER" % (problem, max_uncorrected_ecc))

    def retired(gpu):
        text, why = _health(gpu, "retired_pages.pending", unknown)
        if text is None:
            return "na", why
        if _is(text, "yes"):
            return "bad", "memory pages pending retirement (retired_pages.pending=Yes)"
        if _is(text, "no"):
            return "ok", "no page pending retirement"
        return "na", "unexpected retired_pages.pending %r" % text
    check, problem = _per_gpu("retired_pages", gpus, retired)
    add(check, reason=problem and "%s: reset the GPU (or reboot) to retire them" % problem)

    def remapped(gpu):
        pending, why_pending = _health(gpu, "remapped_rows.pending", unknown)
        failure, why_failure = _health(gpu, "remapped_rows.failure", unknown)
        bad = []
        if _is(pending, "yes"):
            bad.append("row remapping pending (remapped_rows.pending=Yes)")
        if _is(failure, "yes"):
            bad.append("row remapping failed (remapped_rows.failure=Yes)")
        if bad:
            return "bad", ", ".join(bad)
        if pending is None or failure is None:
            return "na", why_pending or why_failure
        if _is(pending, "no") and _is(failure, "no"):
            return "ok", "no row remapping pending or failed"
        return "na", "unexpected remapped_rows pending %r failure %r" % (pending, failure)
    check, problem = _per_gpu("remapped_rows", gpus, remapped)
    add(check, reason=problem and "%s: reset the GPU to apply a pending remap; a failed remap needs the GPU "
        "replaced" % problem)

    def no_fabric_manager():
        return {"unit": FABRIC_MANAGER_UNIT, "read": False, "error": "no fabric manager reader was given"}
    fabric_checks, fabric_reasons, fabric_warnings = _fabric_checks(
        gpus, unknown, links, require_fabric, fabric_manager or no_fabric_manager)
    checks.extend(fabric_checks)
    reasons.extend(fabric_reasons)
    warnings.extend(fabric_warnings)
    return {"status": "fail" if reasons else "pass", "reasons": reasons, "found": found, "checks": checks,
            "warnings": warnings}
