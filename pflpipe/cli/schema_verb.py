"""``pflpipe schema``: print the JSON Schema of the spec (for editors)."""

import json
from pathlib import Path

#: The schema's title.
TITLE = "pflpipe spec"


def register(subparsers) -> None:
    """Add the verb to the command line."""
    parser = subparsers.add_parser(
        "schema", help="Print the JSON Schema of the spec.",
        description="Print the spec's JSON Schema; point your editor's YAML plugin at it.")
    parser.add_argument("-o", "--output", type=Path, help="Write to this file instead of stdout.")
    parser.add_argument("--markdown", action="store_true",
                        help="Print the spec reference as Markdown tables instead.")
    parser.add_argument("--force", action="store_true",
                        help="Replace the -o file even when `pflpipe schema` did not write it.")
    parser.set_defaults(handler=run)


def run(args) -> int:
    """Print or write the schema."""
    from pflpipe.spec import Spec
    from pflpipe.spec.reference import markdown_reference

    if args.markdown:
        text = markdown_reference()
    else:
        schema = Spec.model_json_schema(by_alias=True)
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = TITLE
        text = json.dumps(schema, indent=2) + "\n"
    if args.output:
        from pflpipe.overwrite import claim_file

        claim = claim_file(args.output, "pflpipe schema", force=args.force)
        if created := claim.make_folder():
            print(created)
        args.output.write_text(text)
        claim.record()
        print(f"wrote {args.output}")
    else:
        print(text, end="")
    return 0

