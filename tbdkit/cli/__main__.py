from tbdkit.cli.main import main

main()
