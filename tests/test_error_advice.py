"""Every error message's advice names a thing the CLI or the API has. The generated package is read (its source, not
imported for the scan) for the string literals of raise and warn messages (an exception's constructor, `warnings.warn`,
the CLI's `fail` and argparse's `error`, and the functions that build the advice: `rebuild_hint`, `user_message`):

- a `timmdata COMMAND ...` a message tells the user to run must be a command of the CLI (`timmdata.tools.cli.COMMANDS`);
- each `--option` it names must be an option of that command (its argparse parser, as `timmdata COMMAND --help` shows it:
  `cli.command_parser`); an option named without a command must be one of the command whose code raises the message
  (its `*_main`, else the commands of its module or of the module it is a part of, `tools.simulate` for
  `tools.simulate_bounds`, else any command);
- each keyword a message advises (`pass extensions=...`, `use worker_mode='process'`) must be a parameter of the
  function it advises: the function or class that raises it, or one the message names; the few that cannot be checked
  so are listed, with the reason, in `KEYWORDS_ELSEWHERE`.

And from a shell: a library's advice in Python words (`bad_sample='skip'`) reaches the command line said as the
command's option, or not at all where the command has none (`cli.user_message`), as the commands' own errors show."""

import ast, contextlib, functools, importlib, inspect, io, os, re, sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / 'timmdata'
PH = '\x00'  # a formatted value in an f-string
MESSAGE_CALLS = re.compile(r'(Error|Exception|Warning)$')  # an exception or a warning made: its arguments are the message
MESSAGE_FUNCS = {'warn', 'fail', 'error'}  # warnings.warn, cli.fail, argparse's parser.error
ADVICE_FUNCS = re.compile(r'hint|remedy|user_message')  # functions whose strings are advice appended to messages
VERBS = re.compile(r'\b(pass|use|leave|set|try|call|give)\b', re.I)  # a clause with one of these advises what follows

# Keyword advice whose function is neither the one raising it nor one the message names, checked by hand: (module, keyword)
# -> where the keyword goes. Keep it short: naming the function in the message is better advice, and checked.
KEYWORDS_ELSEWHERE = {
    # StreamPlan.__len__ is reached through len(): no call names it. num_samples is create_dataset's and
    # IterableImageDataset's; the message is in nbs/streams/25_streaming.ipynb, to name create_dataset there
    ('streams.streaming', 'num_samples'): 'create_dataset(..., num_samples=), IterableImageDataset(num_samples=)',
}


def text_of(node):
    "The text of a string expression (a constant, an f-string, `+` of them, `.format` or `%` on one); formatted values as PH."
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return ''.join(v.value if isinstance(v, ast.Constant) else PH for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = text_of(node.left), text_of(node.right)
        return None if a is None and b is None else (PH if a is None else a) + (PH if b is None else b)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return text_of(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == 'format':
        return text_of(node.func.value)
    return None


def call_name(node) -> str:
    f = node.func
    return f.attr if isinstance(f, ast.Attribute) else getattr(f, 'id', '')


def module_of(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix('').parts)
    return '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)


def messages(tree, module: str):
    "(module, line, enclosing defs, text) of every message in `tree`: each argument of a message call, whole."
    out = []

    def visit(node, scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = scope + [node]
            if not isinstance(node, ast.ClassDef) and ADVICE_FUNCS.search(node.name):
                for n in ast.walk(node):
                    t = text_of(n) if isinstance(n, (ast.Constant, ast.JoinedStr)) else None
                    if t:
                        out.append((module, n.lineno, scope, t))
        if isinstance(node, ast.Call) and (MESSAGE_CALLS.search(call_name(node)) or call_name(node) in MESSAGE_FUNCS):
            for a in list(node.args) + [k.value for k in node.keywords]:
                whole = text_of(a)
                parts = [whole] if whole is not None else [text_of(n) for n in ast.walk(a)]  # a conditional, a join
                out.extend((module, node.lineno, scope, t) for t in parts if t)
        for c in ast.iter_child_nodes(node):
            visit(c, scope)

    visit(tree, [])
    return out


def params(node) -> set:
    "The parameter names of a def, or of a class: its __init__'s, its fields (dataclass, NamedTuple)."
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} - {'self', 'cls'}
    out = set()
    for b in node.body:
        if isinstance(b, ast.FunctionDef) and b.name == '__init__':
            out |= params(b)
        if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name):
            out.add(b.target.id)
    return out


def callers_of(tree) -> dict:
    "{called name: the names of the defs (and their classes) that call it} in `tree`."
    out = {}

    def visit(node, scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            scope = scope + [node.name]
        if isinstance(node, ast.Call) and scope and call_name(node):
            out.setdefault(call_name(node), set()).update(scope[-2:])  # the function, and its class for a method
        for c in ast.iter_child_nodes(node):
            visit(c, scope)

    visit(tree, [])
    return out


def library():
    "Every module's tree, its messages, every def and class by name (module-level, methods, nested) with its params, and who calls each name."
    trees, msgs, callables, bases, calls = {}, [], {}, {}, {}
    for p in sorted(LIB.rglob('*.py')):
        if '__pycache__' in p.parts:
            continue
        mod = module_of(p)
        trees[mod] = tree = ast.parse(p.read_text(encoding='utf-8'))
        msgs += messages(tree, mod)
        for k, v in callers_of(tree).items():
            calls.setdefault(k, set()).update(v)
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                callables.setdefault(n.name, set()).update(params(n))
                if isinstance(n, ast.ClassDef):
                    bases.setdefault(n.name, set()).update(getattr(b, 'id', getattr(b, 'attr', '')) for b in n.bases)
    for name in list(callables):  # a class takes its bases' parameters too (no __init__ of its own, or super().__init__)
        seen, todo = set(), list(bases.get(name, ()))
        while todo:
            b = todo.pop()
            if b in callables and b not in seen:
                seen.add(b)
                callables[name] |= callables[b]
                todo += bases.get(b, ())
    for mod, tree in trees.items():  # the signatures Python gives (create_loader's is its LoaderOptions' fields)
        try:
            m = importlib.import_module(f'timmdata.{mod}' if mod else 'timmdata')
        except ImportError:  # an optional extra that is not installed: its module's own defs as read
            continue
        for n in tree.body:
            obj = getattr(m, getattr(n, 'name', ''), None)
            if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and callable(obj):
                try:
                    callables[n.name] |= set(inspect.signature(obj).parameters) - {'self', 'args', 'kwargs'}
                except (TypeError, ValueError):
                    pass
    return trees, msgs, callables, calls


@functools.cache
def scanned() -> tuple:
    "`library()` once per process, when a test first asks (not at collection: each test process collects this module)."
    return library()


CALLER_DEPTH = 4  # how far up the calls a keyword's function is looked for: the call the user made is a few levels up


def advised_functions(scope: list, calls: dict) -> set:
    "The names of the functions a message raised in `scope` can advise: those it is raised in, and their callers up to `CALLER_DEPTH` calls (by name: the call the user made, whose keyword the advice names)."
    seen = {s.name for s in scope}
    edge = set(seen)
    for _ in range(CALLER_DEPTH):
        edge = set().union(*(calls.get(n, set()) for n in edge)) - seen if edge else set()
        seen |= edge
    return seen


def cli():
    from timmdata.tools.cli import COMMANDS, command_parser

    opts = {c: {o for a in command_parser(c)._actions for o in a.option_strings} for c in COMMANDS}
    where = {}  # (module, function) -> the command it runs
    for c, (j, *_) in COMMANDS.items():
        mod, fn = j.split(':') if isinstance(j, str) else (j.__module__, j.__name__)
        where[(mod.removeprefix('timmdata.'), fn)] = c
    return COMMANDS, opts, where


COMMANDS, OPTIONS, COMMAND_OF = cli()
INVOCATION = re.compile(r'(`?)timmdata ([a-z][a-z_-]*)')
OPTION = re.compile(r'(?<![\w-])--([a-z][a-z0-9-]*)')


def invocations(text: str) -> list:
    "(command, its words) of each `timmdata COMMAND ...` the text tells the user to run: in backticks, a known command, or one followed by an option, a placeholder (ROOT) or a value; prose (`timmdata reads ...`) left out."
    out = []
    for m in INVOCATION.finditer(text):
        after = text[m.end() :]
        runs = (
            m.group(1) == '`'
            or m.group(2) in COMMANDS
            or re.match(r' (--|[A-Z]{2,}|' + PH + ')', after) is not None
        )
        if not runs:
            continue
        end = after.index('`') if m.group(1) == '`' and '`' in after else len(re.split(r'[;()]', after)[0])
        out.append((m.group(2), m.start(), m.end() + end))
    return out


def command_context(module: str, scope: list):
    "The commands whose options a bare `--option` in a message of `module` (inside `scope`) may name."
    for s in reversed(scope):
        if (module, s.name) in COMMAND_OF:
            return {COMMAND_OF[(module, s.name)]}
    mine = {c for (m, _), c in COMMAND_OF.items() if m == module}  # the commands of its module,
    near = {c for (m, _), c in COMMAND_OF.items() if module.startswith(m)}  # else of the module it is part of (simulate_bounds)
    return mine or near or set(COMMANDS)


def advised_keywords(text: str) -> list:
    "The keywords a message advises: each `name=` in a clause (up to ';' or '. ') after an advice verb (pass, use, leave, ...)."
    out = []
    for clause in re.split(r';|\.\s', text):
        v = VERBS.search(clause)
        if v:
            out += re.findall(r'(?<![\w.])([a-z_][a-z0-9_]*)=(?!=)', clause[v.end() :])
    return out


def where(module, line, scope) -> str:
    return f"timmdata/{module.replace('.', '/')}.py:{line} ({'.'.join(s.name for s in scope) or 'module level'})"


def command_problems(msgs=None) -> list:
    out = []
    for module, line, scope, text in scanned()[1] if msgs is None else msgs:
        for cmd, a, b in invocations(text):
            if cmd not in COMMANDS:
                out.append(f'{where(module, line, scope)}: `timmdata {cmd}` is no command ({", ".join(COMMANDS)}): {text!r}')
    return out


def option_problems(msgs=None) -> list:
    out = []
    for module, line, scope, text in scanned()[1] if msgs is None else msgs:
        spans = invocations(text)
        for m in OPTION.finditer(text):
            opt = '--' + m.group(1)
            inside = [cmd for cmd, a, b in spans if a <= m.start() < b]
            cmds = set(inside[:1]) if inside else command_context(module, scope)
            if cmds and not any(opt in OPTIONS.get(c, ()) for c in cmds):
                out.append(f'{where(module, line, scope)}: {opt} is no option of timmdata {"/".join(sorted(cmds))}: {text!r}')
    return out


def keyword_problems(msgs=None, callables=None, calls=None) -> list:
    out = []
    callables, calls = scanned()[2] if callables is None else callables, scanned()[3] if calls is None else calls
    for module, line, scope, text in scanned()[1] if msgs is None else msgs:
        for kw in advised_keywords(text):
            if (module, kw) in KEYWORDS_ELSEWHERE:
                continue
            fns = advised_functions(scope, calls) | {w for w in re.findall(r'[A-Za-z_]\w*', text) if w != kw}
            have = set().union(*(params(s) for s in scope), *(callables.get(f, set()) for f in fns))
            if kw not in have:
                out.append(f'{where(module, line, scope)}: advises {kw}=, a parameter of none of the functions it is raised in, their callers or the ones it names: {text!r}')
    return out


def test_the_scan_finds_messages():
    "The scan reads the messages it is for: the CLI's own advice, a reader's, an f-string's."
    msgs = scanned()[1]
    texts = [t for _, _, _, t in msgs]
    assert len(msgs) > 500, len(msgs)
    assert any('`timmdata check' in t for t in texts) and any('--bad-sample' in t for t in texts)
    assert any(PH in t and 'timmdata index' in t for t in texts)
    assert 'bad_sample' in advised_keywords("x; fix or remove the file, or pass bad_sample='skip' to skip such samples")
    assert advised_keywords('rank must be in [0, n); got rank=3, n=2') == []  # what was given is no advice


def test_the_checks_can_fail():
    "Each check flags what it is for, in a module made to break it."
    src = '''
def load(root, extensions=None):
    raise ValueError("no images; run `timmdata fsck ROOT`, or `timmdata check ROOT --colour`; pass extension=('.jpg',)")
def check_main(argv):
    raise ValueError("pass --fast to be quick")
'''
    msgs = messages(ast.parse(src), 'tools.check')
    assert any('`timmdata fsck` is no command' in p for p in command_problems(msgs))
    found = option_problems(msgs)
    assert any('--colour is no option of timmdata check' in p for p in found), found
    assert any('--fast is no option of timmdata check' in p for p in found), found
    assert any('advises extension=' in p for p in keyword_problems(msgs, {}, {})), keyword_problems(msgs, {}, {})
    ok = 'def load(root, extensions=None):\n    raise ValueError("pass extensions=... to accept others")'
    assert keyword_problems(messages(ast.parse(ok), 'readers.x'), {}, {}) == []
    deep = 'def _helper():\n    raise ValueError("pass extensions=... to accept others")\ndef load(root, extensions=None):\n    _helper()'
    tree = ast.parse(deep)
    assert keyword_problems(messages(tree, 'readers.x'), {'load': {'root', 'extensions'}}, callers_of(tree)) == []
    assert keyword_problems(messages(tree, 'readers.x'), {'load': {'root'}}, callers_of(tree)) != []


def test_commands_named_exist():
    found = command_problems()
    assert not found, '\n'.join(found)


def test_options_named_are_the_commands():
    found = option_problems()
    assert not found, '\n'.join(found)


def test_keywords_advised_are_parameters():
    found = keyword_problems()
    assert not found, '\n'.join(found)


def test_the_allow_list_is_still_needed():
    "Each keyword listed by hand is still advised where it is listed, and still not found by the automatic check."
    for (module, kw), why in list(KEYWORDS_ELSEWHERE.items()):
        msgs = [m for m in scanned()[1] if m[0] == module and kw in advised_keywords(m[3])]
        assert msgs, f'{module} no longer advises {kw}=: remove it from KEYWORDS_ELSEWHERE'
        saved = KEYWORDS_ELSEWHERE.pop((module, kw))
        try:
            assert keyword_problems(msgs), f'{module}: {kw}= is checked automatically now: remove it from KEYWORDS_ELSEWHERE'
        finally:
            KEYWORDS_ELSEWHERE[(module, kw)] = saved
