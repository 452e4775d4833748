//! Which compiler command lines `lardon cc` may send to the cluster, and
//! how: a single-source compile (`-c`, one C or C++ source, `-o` given or
//! implied) whose every flag is known. It is split into the local
//! preprocessing (`-E` with the preprocessor flags) and the remote compile
//! of the preprocessed text (`-x cpp-output` with the code-generation
//! flags). Anything else — linking, dependency output alone, several
//! sources, flags that read or write other files, unknown flags — runs
//! locally, unchanged, and the plan says why.

/// What to do with one compiler command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Preprocess here, compile at the cluster.
    Remote(Compile),
    /// Run the command line here as it is, for this reason.
    Local(String),
}

/// The language of a source file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lang {
    /// C (`.c`; `.i` is already preprocessed).
    C,
    /// C++ (`.cc`, `.cpp`, `.cxx`, `.c++`, `.C`, `.cp`; `.ii` preprocessed).
    Cxx,
}

impl Lang {
    /// The `-x` language of its preprocessed form.
    pub(crate) fn preprocessed(self) -> &'static str {
        match self {
            Lang::C => "cpp-output",
            Lang::Cxx => "c++-cpp-output",
        }
    }

    /// The file name the preprocessed source gets at the agent.
    pub(crate) fn input_name(self) -> &'static str {
        match self {
            Lang::C => "in.i",
            Lang::Cxx => "in.ii",
        }
    }
}

/// A single-source compile, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Compile {
    /// The compiler as given (`gcc`, `/usr/bin/gcc-12`).
    pub(crate) compiler: String,
    /// The source file.
    pub(crate) source: String,
    /// Its language.
    pub(crate) lang: Lang,
    /// Whether the source is preprocessed already (`.i`, `.ii`).
    pub(crate) preprocessed: bool,
    /// The object file to write (`-o`, or the source's stem + `.o`).
    pub(crate) output: String,
    /// Flags for the local `-E` run (without `-c`, `-o` and the source).
    pub(crate) preprocess: Vec<String>,
    /// Flags for the remote compile (without preprocessor-only and
    /// dependency flags).
    pub(crate) compile: Vec<String>,
}

/// Flags that take a separate value and only matter to the preprocessor.
const PP_WITH_VALUE: &[&str] = &[
    "-I",
    "-D",
    "-U",
    "-include",
    "-imacros",
    "-isystem",
    "-iquote",
    "-idirafter",
    "-iprefix",
    "-iwithprefix",
    "-iwithprefixbefore",
    "-isysroot",
    "-MF",
    "-MT",
    "-MQ",
];
/// Preprocessor-only flags without a value.
const PP_ALONE: &[&str] = &["-MD", "-MMD", "-MP", "-MG", "-nostdinc", "-nostdinc++", "-undef", "-H", "-P"];
/// Code-generation flags (by prefix) that read or write files beside the
/// object, or depend on the machine they run on: kept local.
const LOCAL_PREFIXES: &[&str] = &[
    "-fprofile-use",
    "-fprofile-generate",
    "-fprofile-arcs",
    "-fauto-profile",
    "-fprofile-dir",
    "-ftest-coverage",
    "--coverage",
    "-fdump-",
    "-fstack-usage",
    "-fcallgraph-info",
    "-fplugin",
    "-save-temps",
    "-march=native",
    "-mtune=native",
    "-mcpu=native",
    "-specs",
    "--sysroot",
    "-B",
    "-Xpreprocessor",
    "-Xassembler",
    "-Xlinker",
    "-fdiagnostics-format=sarif",
    "-aux-info",
    "-fsyntax-only",
    "-gsplit-dwarf",
];
/// Code-generation and warning flags (by prefix) that go to both steps.
const BOTH_PREFIXES: &[&str] = &["-O", "-g", "-W", "-f", "-m", "-std=", "-pedantic"];
/// The same, whole words.
const BOTH_WORDS: &[&str] = &["-ansi", "-w", "-pipe", "-p", "-pg", "-pthread"];

fn language(source: &str) -> Option<(Lang, bool)> {
    let ext = source.rsplit_once('.').map(|(_, e)| e)?;
    Some(match ext {
        "c" => (Lang::C, false),
        "i" => (Lang::C, true),
        "cc" | "cp" | "cxx" | "cpp" | "CPP" | "c++" | "C" => (Lang::Cxx, false),
        "ii" => (Lang::Cxx, true),
        _ => return None,
    })
}

/// The object a source compiles to when `-o` is not given: its stem with
/// `.o`, in the current directory (as gcc does).
fn implied_output(source: &str) -> String {
    let base = source.rsplit('/').next().unwrap_or(source);
    let stem = base.rsplit_once('.').map_or(base, |(s, _)| s);
    format!("{stem}.o")
}

/// Decides what to do with `argv` (the compiler first).
pub(crate) fn plan(argv: &[String]) -> Plan {
    let local = |why: String| Plan::Local(why);
    let Some((compiler, args)) = argv.split_first() else {
        return local("no compiler given".into());
    };
    let mut compile_only = false;
    let mut output = None;
    let mut sources = Vec::new();
    let mut preprocess = Vec::new();
    let mut compile = Vec::new();
    let (mut dep_file, mut dep_target, mut deps) = (false, false, false);
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let value = args.get(i + 1);
        i += 1;
        if a == "-c" {
            compile_only = true;
        } else if a == "-o" {
            let Some(v) = value else { return local("-o without a file".into()) };
            output = Some(v.clone());
            i += 1;
        } else if let Some(v) = a.strip_prefix("-o") {
            output = Some(v.to_owned());
        } else if matches!(a, "-E" | "-S" | "-M" | "-MM") {
            return local(format!("{a} does not compile to an object"));
        } else if a == "-x" || a.starts_with("-x") {
            return local("an explicit -x language".into());
        } else if LOCAL_PREFIXES.iter().any(|p| a.starts_with(p)) {
            return local(format!("{a} reads or writes files beside the object, or names this machine"));
        } else if PP_WITH_VALUE.contains(&a) {
            let Some(v) = value else { return local(format!("{a} without a value")) };
            dep_file |= a == "-MF";
            dep_target |= a == "-MT" || a == "-MQ";
            preprocess.extend([a.to_owned(), v.clone()]);
            i += 1;
        } else if PP_ALONE.contains(&a) {
            deps |= a == "-MD" || a == "-MMD";
            preprocess.push(a.to_owned());
        } else if ["-I", "-D", "-U", "-MF", "-MT", "-MQ"].iter().any(|p| a.starts_with(p))
            || a.starts_with("-Wp,")
        {
            dep_file |= a.starts_with("-MF");
            dep_target |= a.starts_with("-MT") || a.starts_with("-MQ");
            preprocess.push(a.to_owned());
        } else if a.starts_with("-l")
            || a.starts_with("-L")
            || matches!(a, "-shared" | "-static" | "-rdynamic")
        {
            // Link flags: a compile (-c) ignores them; linking is local.
        } else if a == "-" || a.starts_with('@') {
            return local(format!("`{a}` (stdin or a response file)"));
        } else if a.starts_with('-') {
            if !BOTH_PREFIXES.iter().any(|p| a.starts_with(p)) && !BOTH_WORDS.contains(&a) {
                return local(format!("unknown flag {a}"));
            }
            preprocess.push(a.to_owned());
            compile.push(a.to_owned());
        } else {
            sources.push(a.to_owned());
        }
    }
    if !compile_only {
        return local("not a compile (no -c): linking runs here".into());
    }
    let [source] = sources.as_slice() else {
        return local(format!("{} source files (one is distributed)", sources.len()));
    };
    let Some((lang, preprocessed)) = language(source) else {
        return local(format!("`{source}` is not a C or C++ source"));
    };
    let output = output.unwrap_or_else(|| implied_output(source));
    if deps {
        // With -E the dependency file and target would be named after
        // the source; name them after the object, as `-c -o` does.
        if !dep_file {
            let stem = output.rsplit_once('.').map_or(output.as_str(), |(s, _)| s);
            preprocess.extend(["-MF".to_owned(), format!("{stem}.d")]);
        }
        if !dep_target {
            preprocess.extend(["-MT".to_owned(), output.clone()]);
        }
    }
    Plan::Remote(Compile {
        compiler: compiler.clone(),
        source: source.clone(),
        lang,
        preprocessed,
        output,
        preprocess,
        compile,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: &str) -> Plan {
        plan(&line.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    fn remote(line: &str) -> Compile {
        match p(line) {
            Plan::Remote(c) => c,
            Plan::Local(why) => panic!("{line}: local: {why}"),
        }
    }

    fn local(line: &str) -> String {
        match p(line) {
            Plan::Local(why) => why,
            Plan::Remote(c) => panic!("{line}: remote: {c:?}"),
        }
    }

    #[test]
    fn a_single_source_compile_is_split_into_preprocessing_and_compiling() {
        let c = remote("gcc -O2 -g -Wall -Iinc -I inc2 -DX=1 -c src/x.c -o obj/x.o");
        assert_eq!(
            (c.compiler.as_str(), c.source.as_str(), c.output.as_str()),
            ("gcc", "src/x.c", "obj/x.o")
        );
        assert_eq!((c.lang, c.preprocessed), (Lang::C, false));
        assert_eq!(c.preprocess, ["-O2", "-g", "-Wall", "-Iinc", "-I", "inc2", "-DX=1"]);
        assert_eq!(c.compile, ["-O2", "-g", "-Wall"], "no preprocessor flags at the agent");
        // -o implied: the source's stem in the current directory.
        assert_eq!(remote("g++ -c dir/y.cpp").output, "y.o");
        assert_eq!(remote("g++ -c dir/y.cpp").lang, Lang::Cxx);
        assert!(remote("gcc -c x.i -ox.o").preprocessed);
    }

    #[test]
    fn dependency_files_are_made_while_preprocessing_named_after_the_object() {
        let c = remote("gcc -MD -c x.c -o out/x.o");
        assert_eq!(c.preprocess, ["-MD", "-MF", "out/x.d", "-MT", "out/x.o"]);
        assert!(c.compile.is_empty());
        let c = remote("gcc -MMD -MF deps/x.dep -MT x -c x.c");
        assert_eq!(c.preprocess, ["-MMD", "-MF", "deps/x.dep", "-MT", "x"]);
    }

    #[test]
    fn everything_else_runs_locally_and_says_why() {
        assert!(local("gcc x.o y.o -o prog").contains("linking"));
        assert!(local("gcc -O2 x.o y.o -o prog -lm -L/opt/lib").contains("linking"));
        assert_eq!(remote("gcc -c x.c -lm").compile, Vec::<String>::new(), "ignored by a compile");
        assert!(local("gcc x.c -o prog").contains("no -c"));
        assert!(local("gcc -c x.c y.c").contains("2 source files"));
        assert!(local("gcc -M x.c").contains("-M"));
        assert!(local("gcc -MM -c x.c").contains("-MM"));
        assert!(local("gcc -E x.c").contains("-E"));
        assert!(local("gcc -S x.c").contains("-S"));
        assert!(local("gcc -c x.s").contains("not a C or C++ source"));
        assert!(local("gcc -c x.c --frobnicate").contains("unknown flag --frobnicate"));
        assert!(local("gcc -c x.c -march=native").contains("this machine"));
        assert!(local("gcc -c x.c -fprofile-use").contains("-fprofile-use"));
        assert!(local("gcc -c x.c -print-search-dirs").contains("unknown flag"));
        assert!(local("gcc -c -x c x.c").contains("-x"));
        assert!(local("gcc -c @opts x.c").contains("response file"));
        assert!(local("gcc -c x.c -o").contains("-o without"));
        assert!(local("gcc").contains("no -c"));
        assert!(local("").contains("no compiler"));
    }
}
