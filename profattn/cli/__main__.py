from profattn.cli import main

main()
