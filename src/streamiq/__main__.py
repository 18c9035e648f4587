from streamiq.cli.main import main

main()
