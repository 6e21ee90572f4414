"""Counts the test calls the pages show, and hides the ones that do not teach (`#| hide`): they still run in nbtest.

A test call is a `test_*` call from fastcore.test (`test_eq`, `test_fail`, `test_close`, ...) or an `assert`. A page
shows a code cell unless it is `#| hide`, `#| include: false`, `#| echo: false` or an export cell (`#| export`,
`#| exporti`, `#| default_exp`: the reference shows those, not as code with tests).

    python tools/hide_tests.py --count               # visible test calls per notebook (most first) and in all
    python tools/hide_tests.py --apply               # rewrite every notebook in nbs/ (all folders)
    python tools/hide_tests.py --apply nbs/29_mixup.ipynb --dry   # what would change, files left as they are

`--apply`, cell by cell (cells parsed with `ast`; a cell that does not parse, e.g. one with magics, is left alone):
- a cell whose top-level statements are all tests (test calls, asserts, loops/`with` blocks of them, and plain setup
  lines: assignments, imports, helper `def`s, calls that only feed the tests) gets `#| hide` as its first line;
- a cell that opens with an example and ends with tests is split: the example stays, with the cell's saved outputs
  (printed or displayed outputs: only when the hidden part is test calls alone), the tests go to a new `#| hide` cell
  right after it, with the cell's run flags (`#| hide` then `#| slow`, `#| cuda`, `#| hf`, ...: nbdev reads every
  leading directive). Tests between an example and its last lines (a print, a value shown) go to a hidden cell
  between the two parts. A shown part whose new last line is an expression gets `;`, so no new value appears;
- setup whose names a later cell the page shows reads stays visible (the reader must see where a name comes from);
  so does a call of a method the page's own classes define (`dl.load_state_dict(...)` is the example);
- a test that is the page's only example of a name the notebook exports stays visible (the one that shows the
  fewest other tests with it, at most TEACH_AT_MOST), so no page loses its examples; a cell right after a sentence
  that ends with a colon keeps its first test (the sentence promises code);
- export, `show_doc`, `#| eval: false` and already hidden cells are left alone, and a cell that closes its figure
  (`plt.close`) is hidden whole or not at all.
`--apply` is repeated per notebook until nothing changes (a split can free tests higher in the same cell); a second
run changes nothing.
New cells get no id here: `nbdev_clean` gives them one (settings.ini: clean_ids)."""
import argparse, ast, json, re, sys
from pathlib import Path

NBS = Path(__file__).resolve().parent.parent / 'nbs'
TEST_FUNCS = {'test_eq', 'test_ne', 'test_close', 'test_fail', 'test_is', 'test_warns', 'test_stdout', 'test_shuffled',
              'test_eq_type', 'test_fig_exists', 'test_sig'}
DIRECTIVE = re.compile(r'^\s*#\s*\|\s*([\w-]+)\s*:?\s*(.*?)\s*$')
NOT_SHOWN = {'hide', 'export', 'exporti', 'default_exp'}  # `#| exports` shows its code: counted
DISPLAY_ONLY = {'code-fold', 'echo', 'output', 'include', 'fig-cap', 'fig-alt', 'label'}  # not copied to a hidden part
SHOWS = {'print', 'display', 'show_doc', 'Markdown', 'HTML', 'Image'}  # calls whose job is what the page shows


def source(c: dict) -> str:
    return c['source'] if isinstance(c['source'], str) else ''.join(c['source'])


def set_source(c: dict, s: str):
    c['source'] = s if isinstance(c['source'], str) else s.splitlines(keepends=True)


def split_directives(src: str) -> tuple:
    "(directive lines, {name: value}, body) of a cell's source: its leading `#|` lines, then the code."
    lines, dirs = src.split('\n'), []
    while lines and DIRECTIVE.match(lines[0]): dirs.append(lines.pop(0))
    return dirs, {m.group(1): m.group(2) for m in map(DIRECTIVE.match, dirs)}, '\n'.join(lines)


def shown(dirs: dict) -> bool:
    "Whether the page shows the cell's code."
    return not (NOT_SHOWN & set(dirs) or dirs.get('include') == 'false' or dirs.get('echo') == 'false')


def call_name(node) -> str:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ''


def is_test_node(n) -> bool:
    return isinstance(n, ast.Assert) or (isinstance(n, ast.Call) and call_name(n) in TEST_FUNCS)


def n_tests(node) -> int:
    return sum(is_test_node(n) or (isinstance(n, ast.Raise) and call_name(n.exc) == 'AssertionError') for n in ast.walk(node))


def shows_something(node) -> bool:
    "A call whose job is output: print/display/show_doc, or any plt.* / .show() / .imshow() / .plot() call."
    for n in ast.walk(node):
        if not isinstance(n, ast.Call): continue
        f = n.func
        if call_name(n) in SHOWS | {'show', 'imshow', 'plot', 'savefig', 'subplots', 'figure', 'hist', 'bar'}: return True
        while isinstance(f, ast.Attribute): f = f.value
        if isinstance(f, ast.Name) and f.id in ('plt', 'IPython'): return True
    return False


def kind(s, top: bool = True) -> str:
    """'test': a test call, an assert, or a block of tests and setup; 'setup': a line that can feed tests unseen
    (assignment, import, helper def, a call whose job is not output); 'example': anything else (output, a value shown)."""
    if isinstance(s, ast.Assert) or (isinstance(s, ast.Expr) and is_test_node(s.value)): return 'test'
    if isinstance(s, ast.Raise) and call_name(s.exc) == 'AssertionError': return 'test'  # try: f() / raise AssertionError
    if shows_something(s): return 'example'
    if not top and isinstance(s, (ast.Expr, ast.Raise, ast.Continue, ast.Break)):
        return 'setup'  # inside a loop or a try of tests: `ds[3]` in `try: ds[3] / except ...: test_eq(...)`
    if isinstance(s, (ast.For, ast.While, ast.If, ast.With, ast.Try)):
        inner = [kind(t, False) for f in ('body', 'orelse', 'finalbody') for t in getattr(s, f, [])]
        inner += [kind(t, False) for h in getattr(s, 'handlers', []) for t in h.body]
        return 'test' if 'test' in inner and 'example' not in inner else 'example' if 'example' in inner else 'setup'
    if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Import, ast.ImportFrom, ast.FunctionDef,
                      ast.ClassDef, ast.Delete, ast.Pass)):
        return 'setup'
    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call):  # ds.set_epoch(1) or torch.manual_seed(0) before a
        f = s.value.func                                            # test: setup; dl.load_state_dict(...) (a method the
        if top and isinstance(f, ast.Attribute) and f.attr in API:  # page's own classes define) is what the page shows
            return 'example'
        return 'setup'
    return 'example'


TAUGHT = []
TEACH_AT_MOST = 2  # a teaching example shows the call and its result: more tests than this with it is a wall, left hidden
PROMISE_AT_MOST = 1  # "Errors name the file:" keeps the first test below it when it is one test call
MODULES = set()  # names the notebook binds by import: a call on one (np.zeros, random.seed) is not a change to a variable
API = set()  # the public methods of the classes the notebook exports


def _walk_outside_tests(node):
    "ast.walk, less the insides of test calls (what `test_eq(ds.filenames(), ...)` calls changes nothing a page shows)."
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if not is_test_node(n): todo.extend(ast.iter_child_nodes(n))


def stores(nodes) -> set:
    out = set()
    for s in nodes:
        for n in _walk_outside_tests(s):
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)): out.add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)): out.add(n.name)
            elif isinstance(n, (ast.Import, ast.ImportFrom)):
                out |= {(a.asname or a.name).split('.')[0] for a in n.names}
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name):
                out.add(n.func.value.id)  # x.update(...) may change x: a later shown cell reading x needs to see it
    return out - (MODULES - {n.id for s in nodes for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})


def loads(nodes, skip_show_doc=False) -> set:
    out = set()
    for s in nodes:
        for n in ast.walk(s):
            if skip_show_doc and isinstance(n, ast.Call) and call_name(n) == 'show_doc': continue
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load): out.add(n.id)
    return out


def example_loads(nodes) -> set:
    "Names a reader sees used (not counting show_doc(X), which documents X without using it, nor the tests)."
    out = set()
    def walk(n):
        if isinstance(n, ast.Call) and call_name(n) == 'show_doc' or is_test_node(n): return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load): out.add(n.id)
        for c in ast.iter_child_nodes(n): walk(c)
    for s in nodes: walk(s)
    return out


def defines(nodes) -> set:
    "Names the statements bind outright (assignment, def, import, a for loop's target): what is read after comes from here."
    out = set()
    for s in nodes:
        targets = s.targets if isinstance(s, ast.Assign) else [s.target] if isinstance(s, (ast.AnnAssign, ast.For)) else []
        out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)): out.add(s.name)
        if isinstance(s, (ast.Import, ast.ImportFrom)): out |= {(a.asname or a.name).split('.')[0] for a in s.names}
    return out


def free_loads(nodes) -> set:
    "Names the statements read before binding them themselves: what they need from cells above."
    out, bound = set(), set()
    for s in nodes:
        inner = {n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)} if not isinstance(
            s, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else set()  # a name a loop body binds and then reads
        out |= loads([s]) - bound - _local(s) - inner
        bound |= defines([s])
    return out


def _local(s) -> set:
    "Names bound inside the statement's own scopes (function arguments and locals, comprehension targets)."
    out = set()
    for n in ast.walk(s):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            out |= {a.arg for a in n.args.args + n.args.kwonlyargs + n.args.posonlyargs}
            out |= {a.arg for a in (n.args.vararg, n.args.kwarg) if a}
            out |= {m.id for m in ast.walk(n) if isinstance(m, ast.Name) and isinstance(m.ctx, ast.Store)}
        elif isinstance(n, ast.comprehension):
            out |= {m.id for m in ast.walk(n.target) if isinstance(m, ast.Name)}
        elif isinstance(n, ast.ExceptHandler) and n.name: out.add(n.name)
        elif isinstance(n, (ast.For, ast.With)):
            ts = [n.target] if isinstance(n, ast.For) else [i.optional_vars for i in n.items if i.optional_vars]
            out |= {m.id for t in ts for m in ast.walk(t) if isinstance(m, ast.Name)}
    return out


def start_line(s) -> int:
    return min([s.lineno] + [d.lineno for d in getattr(s, 'decorator_list', [])])


class Cell:
    """A code cell as this tool sees it: directives, parsed statements, and the runs of statements decided hidden
    (`runs`: (a, b) ranges, at most two: tests between an example and its output, and tests at the end)."""
    def __init__(self, i: int, c: dict):
        self.i, self.c = i, c
        self.dirlines, self.dirs, self.body = split_directives(source(c))
        self.shown = shown(self.dirs)
        try: self.stmts = ast.parse(self.body).body
        except SyntaxError: self.stmts = None
        self.words = set(re.findall(r'[A-Za-z_]\w*', self.body))
        self.runs = []
        self.editable = self.shown and self.stmts is not None and 'eval' not in self.dirs and any(map(n_tests, self.stmts))
        self.kinds = []  # set by plan(), once the notebook's imported names are known

    def hidden(self, j: int) -> bool:
        return any(a <= j < b for a, b in self.runs)

    def visible(self) -> list:
        return [s for j, s in enumerate(self.stmts) if not self.hidden(j)]

    def visible_tests(self) -> int:
        if not self.shown: return 0
        if self.stmts is None: return len(re.findall(r'\btest_\w+\(|^\s*assert\b', self.body, re.M))
        return sum(map(n_tests, self.visible()))

    def visible_loads(self) -> set:
        "Names the shown part reads from cells above."
        if not self.shown: return set()
        return self.words if self.stmts is None else free_loads(self.visible())

    def binds(self) -> set:
        return set() if self.stmts is None else defines(self.stmts)

    def _run(self, lo: int, hi: int, later: set, pure: bool) -> int:
        "The smallest a >= lo with statements [a:hi] all tests and setup, one test at least, binding nothing `later` reads."
        best = hi
        for a in range(hi - 1, lo - 1, -1):
            part, kinds = self.stmts[a:hi], self.kinds[a:hi]
            if 'example' in kinds or (pure and 'setup' in kinds) or stores(part) & later: break
            if 'test' in kinds: best = a
        return best

    def ends_with_value(self, a: int) -> bool:
        "Whether statement a-1, made a cell's last line by a split, is an expression whose value the page would show."
        s = self.stmts[a - 1]
        return a < len(self.stmts) and isinstance(s, ast.Expr) and not is_test_node(s.value) and not (
            isinstance(s.value, ast.Call) and call_name(s.value) in SHOWS)

    def decide(self, later: set, least: int = 0):
        self.runs = []
        if not self.editable: return
        # printed or displayed outputs cannot be told apart by statement: then the hidden part holds tests alone (a cell's
        # value, an execute_result, comes from its last line, which stays shown)
        n = len(self.stmts)
        has_out = any(o.get('output_type') != 'execute_result' for o in self.c.get('outputs', []))
        # the tests at the end (outputs stay with the example: the hidden part may only hold setup when nothing is shown)
        k = self._run(least, n, later, has_out)
        if k < n: self.runs.append((k, n))
        # tests before the example's last lines (a value, a print): those lines stay, with the cell's outputs
        b = k
        while b > least and not n_tests(self.stmts[b - 1]): b -= 1
        if least < b < k:
            a = self._run(least, b, later | free_loads(self.stmts[b:k]), has_out)
            if a < b and not (has_out and any(map(shows_something, self.stmts[:a]))):
                self.runs.insert(0, (a, b))
        if self.runs != [(0, n)] and any(call_name(m) == 'close' for st in self.stmts for m in ast.walk(st)):
            self.runs = []  # plt.close(fig) at the end keeps a figure off the page: a split would show it


def exported_names(cells: list) -> list:
    "Public names the notebook's export cells define, in order."
    out = []
    for c in cells:
        if 'export' not in c.dirs or c.stmts is None: continue
        for s in c.stmts:
            if isinstance(s, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)): out.append(s.name)
            elif isinstance(s, (ast.Assign, ast.AnnAssign)):
                out += [t.id for t in (s.targets if isinstance(s, ast.Assign) else [s.target]) if isinstance(t, ast.Name)]
    return [n for n in dict.fromkeys(out) if not n.startswith('_')]


def plan(nb: dict) -> list:
    "The notebook's code cells with their split points decided."
    cells = [Cell(i, c) for i, c in enumerate(nb['cells']) if c['cell_type'] == 'code']
    names, least = exported_names(cells), {}
    promised = [c for c in cells if c.editable and c.i and nb['cells'][c.i - 1]['cell_type'] == 'markdown'
                and source(nb['cells'][c.i - 1]).rstrip().endswith(':')]
    MODULES.clear()
    MODULES.update(n for c in cells if c.stmts for s in c.stmts for m in ast.walk(s) if isinstance(m, (ast.Import, ast.ImportFrom))
                   for n in defines([m]))
    API.clear()
    API.update(m.name for c in cells if 'export' in c.dirs and c.stmts for s in c.stmts if isinstance(s, ast.ClassDef)
               for m in s.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and not m.name.startswith('_'))
    for c in cells:
        c.kinds = [kind(s) for s in c.stmts] if c.stmts else []
        if c.stmts and isinstance(c.stmts[-1], ast.Expr) and not is_test_node(c.stmts[-1].value):
            c.kinds[-1] = 'example'  # a cell's last expression: its value is on the page
    for _ in range(4):  # teaching tests made visible read names: decide again until nothing changes
        later = set()  # names a shown cell below reads, bound by no cell in between
        for c in reversed(cells):
            c.decide(later, least.get(c.i, 0))
            later = (later - c.binds()) | c.visible_loads()
        seen = set()
        for c in cells:
            if c.shown and c.stmts is not None: seen |= example_loads(c.visible()) | {n for s in c.visible() for n in loads([s]) if n_tests(s)}
            elif c.shown: seen |= c.words
        changed = False
        for c in promised:  # a sentence that ends with a colon promises code: a cell it introduces is not hidden whole,
            if c.runs[:1] == [(0, len(c.stmts))] and c.i not in least:  # its first test stays (not a loop of twenty)
                j = next(j for j, s in enumerate(c.stmts) if n_tests(s))
                if sum(map(n_tests, c.stmts[:j + 1])) <= PROMISE_AT_MOST: least[c.i], changed = j + 1, True
        for name in names:
            if name in seen or name.isupper(): continue  # a constant is read on its page (show_doc), not called
            # the test that shows it with the fewest other tests: statements k..j become visible
            best = None
            for c in cells:
                for a, b in c.runs:
                    for j in range(a, b):
                        if n_tests(c.stmts[j]) and name in loads([c.stmts[j]]):
                            cost = sum(n_tests(s) for s in c.stmts[a:j + 1])
                            if best is None or cost < best[0]: best = (cost, c, j, a)
            if best and best[0] <= TEACH_AT_MOST:
                _, c, j, a = best
                least[c.i] = max(least.get(c.i, 0), j + 1)
                TAUGHT.append((name, best[0], c.i))
                seen |= loads(c.stmts[a:j + 1]); changed = True
        if not changed: break
    return cells


def rewrite(nb: dict, cells: list) -> int:
    "Applies the plan; returns the number of cells hidden or split."
    done, new = 0, []
    by_i = {c.i: c for c in cells}
    for i, raw in enumerate(nb['cells']):
        c = by_i.get(i)
        if c is None or not c.runs:
            new.append(raw); continue
        if c.runs == [(0, len(c.stmts))]:
            done += 1
            set_source(raw, '\n'.join(['#| hide'] + c.dirlines + [c.body]))
            new.append(raw); continue
        lines, n = c.body.split('\n'), len(c.stmts)
        bounds = sorted({0, n} | {x for r in c.runs for x in r})
        if any(c.stmts[j].lineno <= c.stmts[j - 1].end_lineno for j in bounds[1:-1]):  # `a = f(); test_eq(a, 1)` on one line
            new.append(raw); continue
        cuts = {0: 0, n: len(lines)}
        for j in bounds[1:-1]:  # the line where statement j starts; comments just above it go with it
            cut, prev_end = start_line(c.stmts[j]) - 1, c.stmts[j - 1].end_lineno
            while cut > prev_end and lines[cut - 1].lstrip().startswith('#'): cut -= 1
            cuts[j] = cut
        done += 1
        flags = [d for d in c.dirlines if DIRECTIVE.match(d).group(1) not in DISPLAY_ONLY]
        for b in bounds[1:-1]:  # a shown part's new last line: `;` so its value (ds.set_epoch(1) -> None, or not) stays unshown
            if not c.hidden(b - 1) and c.ends_with_value(b):
                e = c.stmts[b - 1]
                ln = lines[e.end_lineno - 1].encode()
                lines[e.end_lineno - 1] = (ln[:e.end_col_offset] + b';' + ln[e.end_col_offset:]).decode()
        parts = [(c.hidden(a), '\n'.join(lines[cuts[a]:cuts[b]]).strip('\n')) for a, b in zip(bounds, bounds[1:])]
        last_shown = max(j for j, (h, _) in enumerate(parts) if not h)
        if c.runs[-1][1] == n:  # the last line is hidden: its value (an execute_result) is not the shown part's
            raw['outputs'] = [o for o in raw.get('outputs', []) if o.get('output_type') != 'execute_result']
        for j, (h, text) in enumerate(parts):
            cell = raw if j == last_shown else {'cell_type': 'code', 'execution_count': None, 'metadata': {}, 'outputs': [],
                                                'source': raw['source']}
            set_source(cell, '\n'.join((['#| hide'] + flags if h else c.dirlines) + [text.rstrip()]))
            new.append(cell)
    nb['cells'] = new
    return done


def notebooks(paths: list) -> list:
    return sorted(Path(p) for p in paths) if paths else sorted(p for p in NBS.rglob('*.ipynb') if '.ipynb_checkpoints' not in p.parts)


def count(nb: dict) -> int:
    return sum(Cell(i, c).visible_tests() for i, c in enumerate(nb['cells']) if c['cell_type'] == 'code')


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('paths', nargs='*', help='notebooks (default: every notebook in nbs/)')
    ap.add_argument('--count', action='store_true', help='print visible test calls per notebook and in all')
    ap.add_argument('--apply', action='store_true', help='hide and split test cells')
    ap.add_argument('--dry', action='store_true', help='with --apply: print what would change, write nothing')
    ap.add_argument('--top', type=int, default=0, help='with --count: only the N notebooks with most')
    a = ap.parse_args(argv)
    files = notebooks(a.paths)
    if a.apply:
        for f in files:
            nb = json.loads(f.read_text(encoding='utf-8'))
            before = count(nb)
            n = 0
            for _ in range(4):  # a split can free a run of tests further up the same cell: again until nothing changes
                k = rewrite(nb, plan(nb))
                n += k
                if not k: break
            if not n: continue
            after = count(nb)
            print(f'{f}: {n} cells hidden or split, visible test calls {before} -> {after}')
            if not a.dry: f.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + '\n', encoding='utf-8')
    if a.count or not a.apply:
        rows = sorted(((count(json.loads(f.read_text(encoding='utf-8'))), f.relative_to(NBS.parent).as_posix()) for f in files),
                      key=lambda r: (-r[0], r[1]))
        for n, name in rows[:a.top or None]:
            if n: print(f'{n:5d}  {name}')
        print(f'{sum(n for n, _ in rows):5d}  visible test calls in {len(files)} notebooks')
    return 0


if __name__ == '__main__':
    sys.exit(main())
