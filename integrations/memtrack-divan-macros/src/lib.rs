//! `#[bench]` and `#[bench_group]` for memtrack-divan, re-exported there as
//! `divan::bench` and `divan::bench_group` when memtrack-divan is depended on under the
//! name `divan` (`divan = { package = "memtrack-divan", ... }`).
//!
//! divan's `#[bench]` registers a function that takes divan's own `Bencher`; benchmark
//! functions written against memtrack-divan take memtrack-divan's `Bencher` (a wrapper
//! that counts one iteration before divan times it). So `#[bench]` here leaves the
//! function as written (callable as before) and adds a wrapper next to it, registered
//! with divan's real `#[bench]` (`crate = <memtrack-divan>::__divan`, divan's options
//! passed through unchanged, `name` set to the function's name unless given), which
//! wraps divan's `Bencher` and calls the function:
//!
//! ```text
//! #[divan::bench(args = [1, 2])]           fn fill(bencher: divan::Bencher, n: usize) { .. }
//! // becomes the function above, without #[divan::bench], plus:
//! #[::divan::__divan::bench(crate = ::divan::__divan, name = "fill", args = [1, 2])]
//! fn __memtrack_divan_fill(b: ::divan::__divan::Bencher, n: usize) {
//!     fill(::divan::__private::bencher(b, /* uri "crate::module::fill::1" */), n)
//! }
//! ```
//!
//! divan's macro cannot be given a function that takes another `Bencher` type (its
//! registry holds `fn(divan::Bencher)` pointers), and a `fn` pointer cannot carry which
//! function to call, hence one generated wrapper per benchmark.

use proc_macro::TokenStream;
use proc_macro_crate::{FoundCrate, crate_name};
use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use quote::{format_ident, quote};
use syn::{FnArg, GenericParam, ItemFn};

/// The path of memtrack-divan as the calling crate names it: `::divan` when depended on
/// as `divan = { package = "memtrack-divan" }`, `::memtrack_divan` when not renamed.
/// Within memtrack-divan's own package (its doctests: proc-macro-crate cannot tell them
/// from the library) the name is `::memtrack_divan`, which the library also gives itself.
fn crate_path() -> TokenStream2 {
    match crate_name("memtrack-divan") {
        Ok(FoundCrate::Itself) => quote!(::memtrack_divan),
        Ok(FoundCrate::Name(name)) => {
            let ident = syn::Ident::new(&name, Span::call_site());
            quote!(::#ident)
        }
        Err(_) => quote!(::memtrack_divan),
    }
}

/// The attribute's options, split at top-level commas (commas inside `[..]`, `(..)` and
/// `{..}` are inside token groups), each with the name it starts with.
fn split_options(attr: TokenStream2) -> Vec<(String, TokenStream2)> {
    let mut options = Vec::new();
    let mut current = Vec::<TokenTree>::new();
    let mut flush = |current: &mut Vec<TokenTree>| {
        if current.is_empty() {
            return;
        }
        let name = match &current[0] {
            TokenTree::Ident(ident) => ident.to_string(),
            other => other.to_string(),
        };
        options.push((name, current.drain(..).collect()));
    };
    for token in attr {
        match &token {
            TokenTree::Punct(p) if p.as_char() == ',' => flush(&mut current),
            _ => current.push(token),
        }
    }
    flush(&mut current);
    options
}

/// A compile error at the call site.
fn error(message: &str) -> TokenStream {
    quote!(::std::compile_error!(#message);).into()
}

/// How a benchmark function takes its arguments (divan accepts these four).
enum Shape {
    /// `fn f() -> T`: divan benchmarks the function itself.
    Plain,
    /// `fn f(bencher: Bencher)`.
    Bencher,
    /// `fn f(arg: T)` with the `args` option.
    Arg,
    /// `fn f(bencher: Bencher, arg: T)` with the `args` option.
    BencherArg,
}

/// `#[divan::bench]`: divan's attribute, with one counted iteration per benchmark (see the
/// crate docs). Every divan option is accepted except `crate`, which memtrack-divan sets.
#[proc_macro_attribute]
pub fn bench(attr: TokenStream, item: TokenStream) -> TokenStream {
    let krate = crate_path();
    let options = split_options(attr.into());
    if options.iter().any(|(name, _)| name == "crate") {
        return error(
            "memtrack-divan sets divan's `crate` option itself; remove `crate = ...` from \
             #[divan::bench]",
        );
    }
    let has_name = options.iter().any(|(name, _)| name == "name");
    let has_args = options.iter().any(|(name, _)| name == "args");
    let passed: Vec<&TokenStream2> = options.iter().map(|(_, tokens)| tokens).collect();

    let item2: TokenStream2 = item.clone().into();
    let Ok(mut user_fn) = syn::parse::<ItemFn>(item) else {
        // Not a function: let divan's attribute say what is wrong.
        return quote! {
            #[#krate::__divan::bench(crate = #krate::__divan, #(#passed),*)]
            #item2
        }
        .into();
    };
    let shape = match (user_fn.sig.inputs.len(), has_args) {
        (0, false) => Shape::Plain,
        (1, false) => Shape::Bencher,
        (1, true) => Shape::Arg,
        (2, true) => Shape::BencherArg,
        // Anything else divan rejects, with its own message.
        _ => {
            return quote! {
                #[#krate::__divan::bench(crate = #krate::__divan, #(#passed),*)]
                #item2
            }
            .into();
        }
    };

    // `#[ignore]` is read by divan's attribute, so it moves to the wrapper; `#[cfg]`s
    // apply to both.
    let ignore: Vec<syn::Attribute> = user_fn
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("ignore"))
        .cloned()
        .collect();
    user_fn.attrs.retain(|a| !a.path().is_ident("ignore"));
    let cfgs: Vec<&syn::Attribute> = user_fn
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("cfg") || a.path().is_ident("cfg_attr"))
        .collect();

    let fn_ident = &user_fn.sig.ident;
    let fn_name = fn_ident.to_string();
    let fn_name = fn_name.strip_prefix("r#").unwrap_or(&fn_name).to_string();
    let wrapper = format_ident!("__memtrack_divan_{}", fn_name);
    let name_option = (!has_name).then(|| quote!(name = #fn_name,));
    let display_name = match options.iter().find(|(name, _)| name == "name") {
        // `name = EXPR`: the tokens after `=`.
        Some((_, tokens)) => tokens.clone().into_iter().skip(2).collect::<TokenStream2>(),
        None => quote!(#fn_name),
    };

    let generics = &user_fn.sig.generics;
    let where_clause = &generics.where_clause;
    let type_params: Vec<&syn::Ident> = generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) => Some(&t.ident),
            _ => None,
        })
        .collect();
    let const_params: Vec<&syn::Ident> = generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Const(c) => Some(&c.ident),
            _ => None,
        })
        .collect();
    let turbofish_params: Vec<&syn::Ident> = generics
        .params
        .iter()
        .filter_map(|p| match p {
            GenericParam::Type(t) => Some(&t.ident),
            GenericParam::Const(c) => Some(&c.ident),
            GenericParam::Lifetime(_) => None,
        })
        .collect();
    let call = if turbofish_params.is_empty() {
        quote!(#fn_ident)
    } else {
        quote!(#fn_ident::<#(#turbofish_params),*>)
    };

    let arg_type = match user_fn.sig.inputs.last() {
        Some(FnArg::Typed(arg)) if matches!(shape, Shape::Arg | Shape::BencherArg) => Some(&arg.ty),
        _ => None,
    };
    let arg_param = arg_type.map(|ty| quote!(, __memtrack_divan_arg: #ty));
    let arg_name = match arg_type {
        Some(_) => quote! {
            ::std::option::Option::Some({
                #[allow(unused_imports)]
                use #krate::__private::DebugName as _;
                #krate::__private::ArgName(&__memtrack_divan_arg).to_string()
            })
        },
        None => quote!(::std::option::Option::None),
    };

    let bencher = quote! {
        #krate::__private::bencher(
            __memtrack_divan_bencher,
            #krate::__private::uri(
                ::std::module_path!(),
                #display_name,
                &[#(#krate::__private::type_name::<#type_params>()),*],
                &[#({
                    #[allow(unused_imports)]
                    use #krate::__private::DebugName as _;
                    #krate::__private::ArgName(&#const_params).to_string()
                }),*],
                #arg_name,
            ),
        )
    };
    // The argument divan passes is `Copy` (divan's `Arg` conversions yield `&T`, `&str`
    // or a `Copy` value), so the benchmarked closure may capture it by value.
    let body = match shape {
        Shape::Plain => quote!(#bencher.bench(|| #call())),
        Shape::Bencher => quote!(#call(#bencher)),
        Shape::Arg => quote!(#bencher.bench(move || #call(__memtrack_divan_arg))),
        Shape::BencherArg => quote!(#call(#bencher, __memtrack_divan_arg)),
    };

    quote! {
        #user_fn

        #(#cfgs)*
        #(#ignore)*
        #[doc(hidden)]
        #[#krate::__divan::bench(crate = #krate::__divan, #name_option #(#passed),*)]
        fn #wrapper #generics (
            __memtrack_divan_bencher: #krate::__divan::Bencher #arg_param
        ) #where_clause {
            #body
        }
    }
    .into()
}

/// `#[divan::bench_group]`: divan's attribute, unchanged (the benchmarks inside use
/// [`bench`]). Every divan option is accepted except `crate`, which memtrack-divan sets.
#[proc_macro_attribute]
pub fn bench_group(attr: TokenStream, item: TokenStream) -> TokenStream {
    let krate = crate_path();
    let options = split_options(attr.into());
    if options.iter().any(|(name, _)| name == "crate") {
        return error(
            "memtrack-divan sets divan's `crate` option itself; remove `crate = ...` from \
             #[divan::bench_group]",
        );
    }
    let passed: Vec<&TokenStream2> = options.iter().map(|(_, tokens)| tokens).collect();
    let item: TokenStream2 = item.into();
    quote! {
        #[#krate::__divan::bench_group(crate = #krate::__divan, #(#passed),*)]
        #item
    }
    .into()
}
